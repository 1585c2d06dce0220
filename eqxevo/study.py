"""Studies: ablation matrices (seeds x axes x arms) as one command (docs/studies.md)."""

from ._app.study.checks import (
    StudyError as StudyError,
)
from ._app.study.executor import (
    LocalExecutor as LocalExecutor,
    SubmititExecutor as SubmititExecutor,
    run_study as run_study,
)
from ._app.study.group import (
    Program as Program,
    plan as plan,
)
from ._app.study.spec import (
    Cell as Cell,
    Study as Study,
    Trial as Trial,
    load as load,
)
from ._app.study.status import (
    status as status,
)
from ._app.study.tune import (
    tune as tune,
)
