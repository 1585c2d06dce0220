"""The benchmark harness from a checkout: same as `eqxevo bench`.

python scripts/bench.py --milestone all      # see `--help`
python scripts/bench.py --quick              # CI smoke mode
python scripts/bench.py --only layouts       # network layout sweep
"""

import sys

from eqxevo.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
