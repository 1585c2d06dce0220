"""The benchmark harness from a checkout: the same command as `eqxevo bench`."""

from eqxevo.bench.cli import bench

if __name__ == "__main__":
    bench(prog_name="python scripts/bench.py")
