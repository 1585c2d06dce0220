"""Experiments from their configs: read one (`load`), build it (`build`), run it
through `evolve` (`run_experiment`, `resume_run`) and look at a finished run again
(`eval_run`, `load_genome`, `plot_best`, `render_policy`).
"""

from ._app.config import (
    load as load,
)
from ._app.experiment.build import (
    Built as Built,
    build as build,
    effective_config as effective_config,
)
from ._app.experiment.resources import (
    ResourceError as ResourceError,
)
from ._app.experiment.review import (
    Evaluation as Evaluation,
    eval_run as eval_run,
    load_genome as load_genome,
    plot_best as plot_best,
)
from ._app.experiment.run import (
    Run as Run,
    RunInterrupted as RunInterrupted,
    resume_run as resume_run,
    run_experiment as run_experiment,
)
from ._app.experiment.rundir import (
    RunDir as RunDir,
    RunDirError as RunDirError,
)
from ._app.figures import (
    render_policy as render_policy,
)
