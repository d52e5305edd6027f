#!/usr/bin/env bash
# Everything the workloads run on a GPU machine, in ONE call of the device tool:
#   phase 1 (sequential, timed): environment, acceptance suite (torchrun, all GPUs),
#            throughput (ResNet-50, transformer), GPU allocation stress;
#   phase 2 (concurrent, nothing timed): train + resume, SIGUSR1 stop + resume, every fault
#            under torchrun/NCCL (fault on rank 1) and as a single local process.
# Results land in $OUT (at most 8 files come back): summary.txt, the JSON reports, and
# logs.tar.gz with every log, repository paths scrubbed to relative ones.
#
#   OUT=/tmp/out scripts/device/gpu_suite.sh            # on the 2-GPU machine
#   QUICK=1 NPROC=2 OUT=/tmp/out scripts/device/gpu_suite.sh   # CPU dry run, tiny sizes
#
# Timing (2 GPUs): phase 1 ~2.5 min; phase 2 is bounded by the NCCL hang (20 s timeout,
# then ~60 s of watchdog dump wait before the process dies) and by torchrun's 30 s
# SIGTERM->SIGKILL grace for survivors blocked in NCCL after a peer dies: ~2.5 min.
set -uo pipefail  # no -e: failing scenarios are the point; each rc is recorded

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT to the folder that comes back}
NPROC=${NPROC:-$(python3 -c 'import torch; print(max(1, torch.cuda.device_count()))')}
QUICK=${QUICK:-0}
W=.gpu_suite   # relative, so paths printed in logs are relative too
L=$W/logs
rm -rf "$W" && mkdir -p "$L" "$W/reports" "$OUT"

export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT

if [ "$QUICK" = 1 ]; then
  ACC_ARGS=(--gemm-size 256 --gemm-iters 2 --train-steps 100 --allreduce-mb 1)
  RN_ARGS=(--batch-size-per-gpu 2 --image-size 32 --warmup 1 --iters 2)
  TF_ARGS=(--batch-size-per-gpu 2 --seq-len 16 --hidden 32 --layers 2 --heads 2 --vocab 100 --warmup 1 --iters 2)
  ST_ARGS=(--workers 2 --mb 4 --duration-s 1)
else
  ACC_ARGS=(--gemm-size 8192 --gemm-iters 100 --allreduce-mb 512 --allreduce-iters 30)
  RN_ARGS=(--batch-size-per-gpu 128 --warmup 10 --iters 40)
  TF_ARGS=(--batch-size-per-gpu 8 --seq-len 1024 --hidden 1024 --layers 12 --heads 16 --warmup 5 --iters 20)
  ST_ARGS=(--workers 8 --mb 4096 --duration-s 10)
fi
TRUN=(torchrun --standalone --nproc_per_node="$NPROC")
TRAIN=(-m oellm_autoexp.workloads.train)

# step NAME TIMEOUT_S CMD...: run CMD with its output in $L/NAME.log; record rc and seconds.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "\$ $*" > "$L/$name.log"
  timeout -k 10 "$limit" "$@" >> "$L/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$L/steps.txt"
  return 0
}

sigusr1_then_resume() {
  local log=$L/train_sigusr1.log ck=$W/ck/sigusr1
  local t0=$SECONDS
  echo "\$ ${TRUN[*]} ${TRAIN[*]} --steps 5000 --save-interval 1000 --step-time-s 0.05 --log-interval 20 --ckpt-dir $ck" > "$log"
  timeout -k 10 240 "${TRUN[@]}" "${TRAIN[@]}" --steps 5000 --save-interval 1000 --step-time-s 0.05 \
    --log-interval 20 --ckpt-dir "$ck" >> "$log" 2>&1 &
  local tp=$!
  sleep 25
  # The workers are torchrun's children; torchrun itself would die of SIGUSR1.
  python3 scripts/device/signal_workers.py "$tp" USR1 >> "$log" 2>&1
  wait "$tp"
  echo "train_sigusr1 rc=$? seconds=$((SECONDS - t0))" | tee -a "$L/steps.txt"
  local at
  at=$(grep -o 'SIGUSR1 at iteration [0-9]*' "$log" | grep -o '[0-9]*$' | head -1)
  step train_sigusr1_resume 120 "${TRUN[@]}" "${TRAIN[@]}" --steps "$(( ${at:-0} + 10 ))" \
    --save-interval 1000 --log-interval 5 --ckpt-dir "$ck"
}

echo "== phase 1 (sequential)"
{
  date -u; uname -a; nvidia-smi || true
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count()); print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
} > "$L/env.log" 2>&1
cat "$L/env.log"
step acceptance 240 "${TRUN[@]}" -m oellm_autoexp.workloads.acceptance --report "$W/reports/acceptance.json" "${ACC_ARGS[@]}"
step throughput_resnet50 240 "${TRUN[@]}" -m oellm_autoexp.workloads.throughput --model resnet50 \
  --results "$W/reports/throughput_resnet50.json" "${RN_ARGS[@]}"
step throughput_transformer 240 "${TRUN[@]}" -m oellm_autoexp.workloads.throughput --model transformer \
  --results "$W/reports/throughput_transformer.json" "${TF_ARGS[@]}"
step gpu_stress 180 python3 -m oellm_autoexp.workloads.gpu_stress --report "$W/reports/gpu_stress.json" "${ST_ARGS[@]}"

echo "== phase 2 (concurrent)"
FAULT_COMMON=(--steps 12 --save-interval 3 --fault-at-step 5)
(
  step train 180 "${TRUN[@]}" "${TRAIN[@]}" --steps 30 --save-interval 10 --log-interval 5 --ckpt-dir "$W/ck/train"
  step train_resume 180 "${TRUN[@]}" "${TRAIN[@]}" --steps 40 --save-interval 10 --log-interval 5 --ckpt-dir "$W/ck/train"
) &
sigusr1_then_resume &
for f in oom crash kill segv nan; do
  step "fault_${f}_torchrun" 240 "${TRUN[@]}" "${TRAIN[@]}" "${FAULT_COMMON[@]}" --ckpt-dir "$W/ck/t_$f" \
    --fault "$f" --fault-rank 1 --pg-timeout-s 30 &
  step "fault_${f}_local" 120 python3 "${TRAIN[@]}" "${FAULT_COMMON[@]}" --ckpt-dir "$W/ck/l_$f" --fault "$f" &
done
step fault_hang_torchrun 300 "${TRUN[@]}" "${TRAIN[@]}" "${FAULT_COMMON[@]}" --ckpt-dir "$W/ck/t_hang" \
  --fault hang --fault-rank 1 --pg-timeout-s 20 &
wait

echo "== collecting"
# Scrub this checkout's absolute path (and the home directory) from every log and report.
for f in "$L"/*.log "$W"/reports/*.json; do
  sed -i -e "s#$ROOT/##g" -e "s#$HOME#~#g" "$f"
done
cp "$W"/reports/*.json "$OUT"/ 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C "$W" logs
{
  echo "# gpu_suite $(date -u +%FT%TZ), NPROC=$NPROC QUICK=$QUICK"
  cat "$L/steps.txt"
  echo; grep -h '^\[RESULT\]\|^\[COMPUTE\]\|^\[DDP\]\|^\[TRAIN\]' "$L/acceptance.log"
  grep -h '^\[THROUGHPUT\]\|^\[STRESS\]' "$L"/throughput_*.log "$L/gpu_stress.log"
  for f in "$L"/fault_*.log "$L"/train_sigusr1*.log; do
    echo "--- $(basename "$f"): $(wc -l < "$f") lines"
    grep -E -m 6 'Error|error|Signal|exitcode|NaN|Watchdog|Timed out|timeout|SIGUSR1|fault-injection|Fatal' "$f" | cut -c1-300
  done
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
