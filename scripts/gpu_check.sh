#!/usr/bin/env bash
# The checks a GPU machine is for, in one go (docs/performance.md, "GPU"):
# Brax Ant (examples/brax_ant.toml) for a fixed wall-clock budget, stopped as a
# Ctrl-C stops it (the run keeps its best agent), then that agent's held-out
# evaluation; then `eqxevo bench --only determinism` at L4. Figures and the
# Ant run's summary, metrics and learning curve go to $OUT.
#
#   OUT=gpu-out ANT_SECONDS=330 bash scripts/gpu_check.sh [--set KEY=VALUE ...]
#
# Arguments are handed to the Ant run (`eqxevo run --set ...`).
#
# On a machine without network: wheels in .whl/ are installed first (evosax,
# brax, mujoco, mujoco-mjx and what they need beyond the machine's image).
set -u
OUT=${OUT:-gpu-out}
ANT_SECONDS=${ANT_SECONDS:-330}
BENCH_SECONDS=${BENCH_SECONDS:-150}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
WHEELS=${WHEELS:-.whl}
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
EQXEVO="python3 -m eqxevo"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import jax, equinox, brax, mujoco; print("jax", jax.__version__, jax.devices(), "equinox", equinox.__version__, "brax", brax.__version__, "mujoco", mujoco.__version__)' || exit 1
git log --oneline -1 2>/dev/null || true

began=$(date +%s)
rm -rf /tmp/ant /tmp/bench
# --foreground: one SIGINT, to the run alone (without it timeout signals the
# process and its group, a double Ctrl-C, and the run quits before saving its
# agent).
timeout --foreground -s INT "$ANT_SECONDS" $EQXEVO run examples/brax_ant.toml --out /tmp/ant "$@" 2>&1 | grep -v 'running:'
run_dir=$(ls -d /tmp/ant/*/ | head -1)
echo "ant: $(( $(date +%s) - began )) s wall, run directory $run_dir"
$EQXEVO eval "$run_dir" --episodes 64 2>&1 | tee "$OUT/ant_eval.txt"
$EQXEVO eval "$run_dir" --episodes 64 --genome mean 2>&1 | tee -a "$OUT/ant_eval.txt"
for f in summary.json metrics.jsonl fitness.png config.toml; do
  cp "$run_dir/$f" "$OUT/ant_$f" 2>/dev/null
done

timeout --foreground -s INT "$BENCH_SECONDS" $EQXEVO bench --only determinism --milestone L4 \
  --repeats 2 --out /tmp/bench 2>&1 | tail -30
cp /tmp/bench/report.md "$OUT/bench_report.md" 2>/dev/null
cp /tmp/bench/determinism.csv "$OUT/bench_determinism.csv" 2>/dev/null
ls /tmp/bench 2>/dev/null
exit 0
