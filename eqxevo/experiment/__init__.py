"""Experiments from their configs: build (`build`), resources (`resources`), the
run directory (`rundir`), one run through `evolve` (`run`) and a finished run
looked at again (`review`).
"""

from .build import (
    Built as Built,
    build as build,
    effective_config as effective_config,
)
from .resources import ResourceError as ResourceError
from .review import (
    Evaluation as Evaluation,
    eval_run as eval_run,
    load_genome as load_genome,
    plot_best as plot_best,
)
from .run import (
    Run as Run,
    RunInterrupted as RunInterrupted,
    resume_run as resume_run,
    run_experiment as run_experiment,
)
from .rundir import RunDir as RunDir, RunDirError as RunDirError
