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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT}
W=${W:-/tmp/two_gpu_proof}
rm -rf "$W" && mkdir -p "$W" "$OUT"
if [ -d .whl ] && ! python3 -c 'import pydantic, sqlalchemy, apscheduler, watchdog' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$ROOT PYTHONUNBUFFERED=1
# NVLink multicast stays off on the lent machines (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=scripts/device/gpu_scenarios.py
{ date -u; nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'; } > "$OUT/env.txt" 2>&1

python3 $S faults "$W" --nproc 2 --timeouts 600,30 --faults "${FAULTS:-oom,crash,segv,kill,hang,nan,raise_and_linger}" \
  --limit-s "${LIMIT_S:-400}" > "$W/faults.out" 2>&1 &
python3 $S recovery "$W" --nproc 2 --limit-s "${LIMIT_S:-400}" > "$W/recovery.out" 2>&1 &
wait
python3 $S table "$W" "$OUT/outcomes.json" > "$OUT/summary.txt" 2>&1
cat "$W/faults.out" "$W/recovery.out" >> "$OUT/summary.txt"
# The work dir's own path is this machine's: logs keep paths relative to it.
tar -czf "$OUT/logs.tar.gz" -C "$W" --exclude='checkpoints' --exclude='*.db-*' --exclude='.filler' . 2>/dev/null
cat "$OUT/summary.txt"
