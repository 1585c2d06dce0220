"""Studies: ablation matrices (seeds x axes x arms) as one command.

A study file (`spec`) expands into cells and runs; runs that differ only in
array values share one compiled program (`group`); a program runs through one
`evolve(..., runs=R)` and keeps a directory per run (`runner`); executors run
programs here or as a SLURM job array (`executor`); `status` and `report`
read the output folder. docs/studies.md is the guide.
"""

from .executor import (
    LocalExecutor as LocalExecutor,
    SubmititExecutor as SubmititExecutor,
    run_study as run_study,
)
from .group import Program as Program, plan as plan
from .spec import (
    Cell as Cell,
    Run as Run,
    Study as Study,
    StudyError as StudyError,
    load as load,
)
from .status import status as status
