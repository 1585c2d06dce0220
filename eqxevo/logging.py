"""Deprecated: records, sinks and progress moved to `eqxevo.metrics`, figures to
`eqxevo.plots` (a module called `logging` shadowed the standard library's)."""

from ._deprecated import moved

moved("eqxevo.logging", "eqxevo.metrics (and eqxevo.plots for plot_fitness)")

from .metrics import (  # noqa: E402
    MetricsLog as MetricsLog,
    Progress as Progress,
    history_records as history_records,
)
from .plots import plot_fitness as plot_fitness  # noqa: E402
