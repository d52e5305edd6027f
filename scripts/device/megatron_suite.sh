#!/usr/bin/env bash
# The tiny megatron-core GPT under plain torchrun (no monitor) on a 2-GPU machine, in ONE call
# of the device tool: every case's combined stdout+stderr in its own log, cases side by side.
#
#   healthy                     300 iterations, save every 50, log every 10 (torch_dist format)
#   resume_changed_train_iters  healthy's checkpoint loaded with a larger --train-iters (fails at load)
#   sigterm / sigterm_resume    SIGTERM to both ranks mid-run (--exit-signal-handler: save, exit 0),
#                               then the same command again: resumes and finishes 300/300
#   oom                         a micro-batch that does not fit (long sequences, unfused attention)
#   stop                        rank 1 frozen with kill -STOP (--distributed-timeout-minutes 1)
#   kill9                       rank 1 killed with kill -9
#   nan                         an absurd learning rate: NaN loss -> Megatron's rerun machinery
#   torch_format                a short run saving in the legacy `torch` format
#
# $OUT gets summary.txt, logs.tar.gz (every log) and checkpoints.tar.gz (one small
# checkpoint tree per format). Paths in logs are relative to the work dir (.megatron_suite).
#
#   OUT=/tmp/out scripts/device/megatron_suite.sh            # on the GPU machine
#   FAKE=1 OUT=/tmp/out scripts/device/megatron_suite.sh     # CPU dry run of the wiring
set -uo pipefail  # no -e: failing cases are the point; each rc is recorded

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off), wait_for
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT to the folder that comes back}
FAKE=${FAKE:-0}
W=.megatron_suite
L=$W/logs
rm -rf "$W" && mkdir -p "$L" "$W/ck" "$OUT"

export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export CUDA_DEVICE_MAX_CONNECTIONS=1

if [ "$FAKE" = 1 ]; then
  TRUN=(torchrun --standalone --nproc_per_node=2 tests/integration/fake_megatron.py)
else
  TRUN=(torchrun --standalone --nproc_per_node=2 -m oellm_autoexp.workloads.megatron_gpt)
fi
# The tiny model (config/backend/megatron/tiny_gpt.yaml has the same values).
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128
  --max-position-embeddings 128 --tokenizer-type NullTokenizer --vocab-size 1024 --mock-data
  --transformer-impl local --no-persist-layer-norm --no-gradient-accumulation-fusion
  --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion)
TRAIN=(--micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine
  --lr-warmup-iters 10 --weight-decay 0.01 --clip-grad 1.0 --seed 1234
  --eval-iters 0 --eval-interval 1000000 --distributed-backend nccl --exit-signal-handler)

# case NAME LIMIT_S ARGS...: torchrun the tiny GPT with ARGS; output in $L/NAME.log, rc recorded.
case_run() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "\$ ${TRUN[*]} ${MODEL[*]} ${TRAIN[*]} $*" > "$L/$name.log"
  timeout -k 10 "$limit" "${TRUN[@]}" "${MODEL[@]}" "${TRAIN[@]}" "$@" >> "$L/$name.log" 2>&1
  echo "$name rc=$? seconds=$((SECONDS - t0))" | tee -a "$L/cases.txt"
}

# rank_pid NAME RANK: the pid of one rank of the run that saves to ck/NAME.
rank_pid() { python3 scripts/device/rank_pid.py "--save $W/ck/$1 " "$2"; }

# fault NAME SIGNAL RANKS AT LIMIT_S ARGS...: run NAME; at iteration AT send SIGNAL to RANKS.
fault() {
  local name=$1 sig=$2 ranks=$3 at=$4 limit=$5; shift 5
  case_run "$name" "$limit" --save "$W/ck/$name" --load "$W/ck/$name" "$@" &
  local runner=$!
  if wait_for "$L/$name.log" "iteration +$at/" "$limit"; then
    local r pids=()
    for r in $ranks; do pids+=("$(rank_pid "$name" "$r")"); done
    echo "[suite] $(date -u +%T) kill -$sig ${pids[*]} (ranks $ranks)" >> "$L/$name.signals.txt"
    kill "-$sig" "${pids[@]}"
  fi
  wait "$runner"
}

ITERS=(--train-iters 300 --save-interval 50 --log-interval 10)
healthy() {
  case_run healthy 240 "${ITERS[@]}" --save "$W/ck/healthy" --load "$W/ck/healthy"
  case_run resume_changed_train_iters 120 --train-iters 330 --save-interval 50 --log-interval 10 \
    --save "$W/ck/healthy" --load "$W/ck/healthy"
}
sigterm() {
  fault sigterm TERM "0 1" 120 240 "${ITERS[@]}"
  case_run sigterm_resume 180 "${ITERS[@]}" --save "$W/ck/sigterm" --load "$W/ck/sigterm"
}

{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  python3 -c 'from megatron.core.package_info import __version__ as v; print("megatron-core", v)'
} > "$L/env.log" 2>&1
cat "$L/env.log"

healthy &
sigterm &
# The attention scores alone (256 x 4 heads x 8192^2 floats) are 275 GB: more than one H200.
case_run oom 180 --train-iters 100 --save-interval 50 --log-interval 10 --save "$W/ck/oom" \
  --load "$W/ck/oom" --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 256 \
  --global-batch-size 512 --no-create-attention-mask-in-dataloader &
fault stop STOP 1 20 230 --train-iters 100000 --save-interval 1000 --log-interval 10 \
  --distributed-timeout-minutes 1 &
fault kill9 KILL 1 20 150 --train-iters 100000 --save-interval 1000 --log-interval 10 &
case_run nan 180 --train-iters 100 --save-interval 50 --log-interval 1 --lr 1e20 --min-lr 1e19 \
  --lr-warmup-iters 0 --save "$W/ck/nan" --load "$W/ck/nan" &
case_run torch_format 180 --train-iters 20 --save-interval 10 --log-interval 5 --ckpt-format torch \
  --save "$W/ck/torch_format" --load "$W/ck/torch_format" &
wait
# A frozen rank that outlived its case is still stopped: end it.
for r in 0 1; do pid=$(rank_pid stop "$r") && kill -9 "$pid" 2>/dev/null; done

echo "== collecting"
tar -czf "$OUT/logs.tar.gz" -C "$W" logs
# One checkpoint tree per format: the latest iteration and the tracker file.
tar -czf "$OUT/checkpoints.tar.gz" -C "$W/ck" \
  healthy/latest_checkpointed_iteration.txt "healthy/iter_$(printf %07d 300)" \
  torch_format/latest_checkpointed_iteration.txt "torch_format/iter_$(printf %07d 20)" 2>>"$L/cases.txt"
{
  echo "# megatron_suite $(date -u +%FT%TZ) FAKE=$FAKE"
  cat "$L/env.log" "$L/cases.txt" "$L"/*.signals.txt 2>/dev/null
  du -sh "$W"/ck/* 2>/dev/null
  for f in "$L"/*.log; do
    echo "--- $(basename "$f"): $(wc -l < "$f") lines"
    grep -E -m 8 'Error|error|exiting|NaN|nan|Watchdog|Timed out|successfully (saved|loaded)|iteration +[0-9]+/ +[0-9]+ \|' "$f" \
      | cut -c1-240 | tail -n 6
  done
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
