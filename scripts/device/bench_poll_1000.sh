#!/usr/bin/env bash
# Benchmark 4 (benchmarks/bench_poll_1000_jobs.py) at 1,000 RUNNING jobs on the device machine:
# 16 cores and root, which this 2-core VM lacks. This repository's Slurm, munge and MariaDB travel
# with it (slurm_kit.sh pack .slurmkit, here), the Python packages as wheels (.whl).
#   device run, carry [".whl", ".slurmkit"]:  scripts/device/bench_poll_1000.sh [JOBS] [WINDOW_S]
# The results file lands in benchmarks/results/ and is copied to $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/bench_poll_out}"
mkdir -p "$out"
scripts/device/slurm_kit.sh unpack .slurmkit >"$out/unpack.log" 2>&1
python3 -m pip install -q --no-index --find-links .whl --target /tmp/site \
  pydantic pyyaml sqlalchemy jinja2 apscheduler watchdog ahocorasick-rs >"$out/pip.log" 2>&1
export PYTHONPATH="/tmp/site:$PWD"
# 4 nodes x 256 CPUs hold 1,000 one-CPU jobs; no per-job accounting sampler (1,000 of them would
# load the machine the monitor is measured on).
SLURM_LOCAL_TIMEOUT=40 SLURM_LOCAL_NODES=4 SLURM_LOCAL_CPUS=256 \
  SLURM_LOCAL_EXTRA_CONF='JobAcctGatherType=jobacct_gather/none' \
  scripts/slurm_local.sh up >/tmp/slurm_env.sh 2>"$out/slurm_up.log"
# shellcheck disable=SC1091
source /tmp/slurm_env.sh
export AUTOEXP_SLURM_CONF="$SLURM_CONF"
export AUTOEXP_BENCH_MACHINE="device machine ($(nproc) cores, gVisor), localhost Slurm carried by scripts/device/slurm_kit.sh"
python3 benchmarks/bench_poll_1000_jobs.py --jobs "${1:-1000}" --window "${2:-120}" 2>&1 | tee "$out/bench.txt"
cp benchmarks/results/poll_1000_jobs-* "$out/"
