"""Studies: ablation matrices (seeds x axes x arms) as one command (docs/studies.md)."""

from .executor import (
    LocalExecutor as LocalExecutor,
    SubmititExecutor as SubmititExecutor,
    run_study as run_study,
)
from .group import Program as Program, plan as plan
from .spec import (
    Cell as Cell,
    Study as Study,
    StudyError as StudyError,
    Trial as Trial,
    load as load,
)
from .status import status as status
