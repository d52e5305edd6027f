#!/usr/bin/env bash
# One device call that proves this tree's monitor on one GPU, every scenario under `autoexp run`:
#   1. the pre-flight check's real figures beside the acceptance suite's bf16 GEMM, and a GPU made
#      slow by a concurrent load caught (scripts/device/preflight_gpu.sh; alone on the GPU, ~1.5 min);
#   2. then side by side (~5 min): the fault scenarios on one rank (gpu_scenarios.py faults: oom,
#      crash, segv, kill, hang, nan, raise_and_linger; 30 s collective timeout) and a healthy run
#      whose monitor is SIGSTOPped longer than the hang floor (gpu_scenarios.py paused).
# $OUT gets env.txt, summary.txt, outcomes.json, logs.tar.gz and the pre-flight's three files.
#
#   OUT=/tmp/out scripts/device/session_proof.sh
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off); use_wheels, env_report
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT}
W=${W:-/tmp/session_proof}
FAULTS=${FAULTS:-oom,crash,segv,kill,hang,nan,raise_and_linger}
rm -rf "$W" && mkdir -p "$W" "$OUT"
# The machine has torch, not the monitor's own dependencies: they come as wheels in .whl.
use_wheels "$ROOT"
S=scripts/device/gpu_scenarios.py
env_report "$OUT/env.txt"

if [ "${PREFLIGHT:-1}" = 1 ]; then
  OUT=$OUT scripts/device/preflight_gpu.sh > "$W/preflight.out" 2>&1
  echo "preflight_gpu.sh exited $?" >> "$OUT/env.txt"
fi

python3 $S faults "$W" --nproc 1 --timeouts 30 --faults "$FAULTS" --limit-s "${LIMIT_S:-330}" > "$W/faults.out" 2>&1 &
python3 $S paused "$W" --nproc 1 --pause-s "${PAUSE_S:-75}" --limit-s "${LIMIT_S:-330}" > "$W/paused.out" 2>&1 &
wait
python3 $S table "$W" "$OUT/outcomes.json" > "$OUT/summary.txt" 2>&1
cat "$W/faults.out" "$W/paused.out" >> "$OUT/summary.txt"
tar -czf "$OUT/logs.tar.gz" -C "$W" --exclude='checkpoints' --exclude='*.db-*' . 2>/dev/null
cat "$OUT/summary.txt"
