#!/usr/bin/env bash
# Issue 30's run on a machine of two GPUs, one device call (~7 min), everything side by side:
#   - the 2-GPU fault matrix under `autoexp run` (gpu_scenarios.py faults: oom, crash, segv, kill,
#     hang, nan, raise_and_linger on rank 1 while rank 0 blocks in NCCL; collective timeouts 600 s
#     and 30 s);
#   - the recovery scenarios with two ranks (gpu_scenarios.py recovery): a checkpoint that fails
#     to load on rank 0 only (rank 1 blocks in the broadcast), a save that fails on rank 0's full
#     disk, torchrun --max-restarts 1 with rank 1 killed once and twice, and the monitor SIGKILLed
#     mid-run with a second one taking the session over.
# $OUT gets env.txt, summary.txt, outcomes.json and logs.tar.gz.
#
#   OUT=/tmp/out scripts/device/two_gpu_proof.sh
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off); use_wheels, env_report
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT}
W=${W:-/tmp/two_gpu_proof}
rm -rf "$W" && mkdir -p "$W" "$OUT"
use_wheels "$ROOT"
S=scripts/device/gpu_scenarios.py
env_report "$OUT/env.txt"

python3 $S faults "$W" --nproc 2 --timeouts 600,30 --faults "${FAULTS:-oom,crash,segv,kill,hang,nan,raise_and_linger}" \
  --limit-s "${LIMIT_S:-400}" > "$W/faults.out" 2>&1 &
python3 $S recovery "$W" --nproc 2 --limit-s "${LIMIT_S:-400}" > "$W/recovery.out" 2>&1 &
wait
python3 $S table "$W" "$OUT/outcomes.json" > "$OUT/summary.txt" 2>&1
cat "$W/faults.out" "$W/recovery.out" >> "$OUT/summary.txt"
# The work dir's own path is this machine's: logs keep paths relative to it.
tar -czf "$OUT/logs.tar.gz" -C "$W" --exclude='checkpoints' --exclude='*.db-*' --exclude='.filler' . 2>/dev/null
cat "$OUT/summary.txt"
