#!/usr/bin/env bash
# Issue 12's acceptance runs: the tiny megatron-core GPT on 2 GPUs under `autoexp run` (local
# executor, config/experiments/megatron_tiny_local.yaml), four scenarios side by side, each in
# its own folder with its own --state-dir and master port:
#
#   walltime  at iteration 100 of attempt 1 the batch shell gets USR1, as from Slurm's
#             --signal=B:USR1@N; it reaches the ranks as SIGTERM, Megatron saves and exits 0;
#             the monitor resubmits (scheduler rule), attempt 2 resumes and finishes 300/300
#   oom       a micro-batch that does not fit (256 x 8192 tokens, unfused attention): no restart
#   stop      rank 1 of attempt 1 frozen with kill -STOP at iteration 60: rank 0 blocks in NCCL,
#             the watchdog line comes after --distributed-timeout-minutes 1; restart, resume
#   kill9     rank 1 of attempt 1 killed with kill -9 at iteration 60; restart, resume
#
# $OUT gets results.md / results.json (scenario -> decisions, fatal line -> decision delay,
# attempts, completed?) and autoexp_logs.tar.gz (every attempt's log, autoexp's own output,
# status.json and explain.txt per scenario).
#
# Issue 27's three, with SCENARIOS="... loadfail linger diskfull" (diskfull mounts a tmpfs: root):
#   loadfail  the newest checkpoint damaged (same length) and rank 1 killed: the next attempt fails
#             to load it -> quarantined, rolled back to the previous one, completes
#   linger    rank 1 raises at iteration 120 and lingers (AUTOEXP_FAULT): decided at the settle window
#   diskfull  the second save meets a full tmpfs: stop, the reason names the disk's free space
#
# Session 8's burst, with SCENARIOS="... burst":
#   burst     rank 1 killed in four attempts in a row, each time short of the best iteration (last
#             logged 90, then 70, 80, 60 after resuming from 50): "past the best iteration" alone would stop
#             at the fourth ("retry budget exhausted (attempt 4/3)"); refill_on_training gives each
#             restart back (every attempt trained and died somewhere new): the fifth completes
#
# Session 9's silent hang, with SCENARIOS="... silent":
#   silent    rank 1 frozen at iteration 60 as in `stop`, but NCCL's watchdog is 5 min away and the
#             scheduled floor is 15 s (monitoring.hang.scheduled_floor_s): tiny_gpt saves every 50 and
#             never evaluates, so nothing is due between 60 and 69: hang verdict ~15 s after the last
#             line, restart, resume, complete (the plain floor, 90 s here, would wait six times longer)
#
# Session 10's guess, with SCENARIOS="... guard":
#   guard     rank 1's own code gives up at iteration 120 in its own words (AUTOEXP_FAULT=guard: an ERROR
#             log line, exit 1, no traceback; oellm_autoexp/workloads/faults.py): no pattern knows the line
#             and torchrun only says `exitcode : 1`; the monitor reads its words (core/classify/guess.py):
#             nccl-like (a connection reset), restart, resume, complete. Without the guess: `exception`, stop.
#
# Session 14's configuration error after training, with SCENARIOS="... filegone":
#   filegone  rank 1's dataset index is gone at iteration 120 (AUTOEXP_FAULT=file_gone, once): Python's
#             FileNotFoundError, a configuration error; iterations 1-119 trained with the same arguments,
#             so one restart (config_error_after_training), resume from 100, complete. Before: stop.
#
#   OUT=/tmp/out scripts/device/megatron_autoexp.sh          # on the 2-GPU machine (~6 min)
#   FAKE=1 OUT=/tmp/out scripts/device/megatron_autoexp.sh   # CPU dry run with stand-in ranks
set -uo pipefail

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off), wait_for
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT to the folder that comes back}
FAKE=${FAKE:-0}
LIMIT_S=${LIMIT_S:-420}  # per scenario; all four run at once
W=$ROOT/.megatron_autoexp
EXP=$ROOT/config/experiments/megatron_tiny_local.yaml
rm -rf "$W" && mkdir -p "$W" "$OUT"

export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

COMMON=()
if [ "$FAKE" = 1 ]; then
  # Stand-in ranks on CPU (tests/integration/fake_megatron.py): the wiring, not Megatron.
  COMMON=(backend.module=null "backend.megatron_path=$ROOT/tests/integration" backend.script=fake_megatron.py
    slurm.gpus_per_node=0 "backend.torchrun=[$(command -v python3),-m,torch.distributed.run]")
fi

# event NAME EVENT: append "<unix time> EVENT" to the scenario's events.txt.
event() { echo "$(date +%s.%N) $2" >> "$W/$1/events.txt"; }

# log_of NAME N: the log of local job N of scenario NAME.
log_of() { echo "$W/$1/outputs/megatron_tiny/logs/slurm-local-$2.out"; }

# watch_fatal NAME REGEX: record when a line matching REGEX first shows in any attempt's log.
watch_fatal() {
  local t=0
  until grep -Eqs "$2" "$W/$1"/outputs/megatron_tiny/logs/*.out; do
    sleep 0.5; t=$((t + 1))
    if [ -e "$W/$1/status.json" ] || [ "$t" -ge $(( LIMIT_S * 2 )) ]; then return 0; fi
  done
  event "$1" fatal_line_seen
}

# scenario NAME PORT OVERRIDES...: `autoexp run` in $W/NAME, then its status and explain.
scenario() {
  local name=$1 port=$2; shift 2
  mkdir -p "$W/$name" && cd "$W/$name" || return
  timeout -k 10 "$LIMIT_S" python3 -m oellm_autoexp --state-dir state run "$EXP" "${COMMON[@]}" \
    "slurm.master_port=$port" "$@" > autoexp.out 2>&1
  local rc=$?
  echo "rc=$rc seconds=$SECONDS" >> autoexp.out
  python3 -m oellm_autoexp --state-dir state status --json > status.json 2>> autoexp.out
  python3 -m oellm_autoexp --state-dir state explain megatron_tiny > explain.txt 2>&1
  # Clean-up, after the record above: a run cut off by the limit, or a job whose processes
  # outlive the monitor's decision (a rank stuck in NCCL or in DataLoader clean-up), would
  # keep the GPUs. `autoexp cancel` ends the session's jobs as a user would.
  python3 -m oellm_autoexp --state-dir state cancel >> autoexp.out 2>&1
  mkdir -p logs && cp outputs/megatron_tiny/logs/*.out logs/ 2>/dev/null
}

# at_iteration NAME IT: wait until attempt 1 logs iteration IT.
at_iteration() { wait_for "$(log_of "$1" 1)" "iteration +$2/" "$LIMIT_S"; }

walltime() {
  scenario walltime 29601 &
  if at_iteration walltime 100; then
    # The local executor has no time limit: send what Slurm's --signal=B:USR1 would send.
    kill -USR1 "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' \
      "$W/walltime/state/local_jobs/1/job.json")" && event walltime injected_USR1
  fi
  wait
}

# freeze_or_kill NAME SIGNAL PORT [OVERRIDES...]: at iteration 60 of attempt 1, SIGNAL to rank 1.
freeze_or_kill() {
  scenario "$1" "$3" "${@:4}" &
  if at_iteration "$1" 60; then
    local pid
    pid=$(python3 scripts/device/rank_pid.py "/.megatron_autoexp/$1/outputs/" 1) \
      && kill "-$2" "$pid" && event "$1" "injected_$2"
  fi
  wait
}

OOM=(backend.megatron.seq_length=8192 backend.megatron.max_position_embeddings=8192
  backend.megatron.micro_batch_size=256 backend.megatron.global_batch_size=512
  +backend.megatron.no_create_attention_mask_in_dataloader=true)

# loadfail (issue 27): at iteration 160 (checkpoints at 50, 100, 150) every file of iter_0000150
# but its metadata gets same-length garbage and rank 1 is killed: the next attempt fails in
# load_checkpoint -> iter_0000150 quarantined, roll back to 100, complete.
loadfail() {
  scenario loadfail 29605 &
  if at_iteration loadfail 160; then
    python3 scripts/device/disk_faults.py damage \
      "$W/loadfail/outputs/megatron_tiny/checkpoints/iter_0000150" > /dev/null && event loadfail damaged_iter_150
    local pid
    pid=$(python3 scripts/device/rank_pid.py "/.megatron_autoexp/loadfail/outputs/" 1) \
      && kill -KILL "$pid" && event loadfail injected_KILL
  fi
  wait
}

# diskfull (issue 27): the checkpoint folder is a 64 MiB tmpfs; once the first checkpoint is
# saved, a filler leaves half of its size free, so the save at 100 fails -> stop naming the disk.
diskfull() {
  local ck="$W/diskfull/outputs/megatron_tiny/checkpoints"
  mkdir -p "$ck"
  if ! mount -t tmpfs -o size=64m tmpfs "$ck"; then event diskfull not_run_mount_refused; return; fi
  scenario diskfull 29607 &
  if at_iteration diskfull 60; then
    local used
    used=$(du -sb "$ck" | cut -f1)
    python3 scripts/device/disk_faults.py fill "$ck" $((used / 2)) > /dev/null && event diskfull filled
  fi
  wait
  umount -l "$ck"
}

SCENARIOS=${SCENARIOS:-walltime oom stop kill9}
for s in $SCENARIOS; do mkdir -p "$W/$s"; done
for s in $SCENARIOS; do
  case $s in
    walltime) walltime & watch_fatal walltime 'exiting program after receiving SIGTERM' & ;;
    oom) scenario oom 29602 "${OOM[@]}" & watch_fatal oom 'OutOfMemoryError' & ;;
    stop) freeze_or_kill stop STOP 29603 & watch_fatal stop 'Watchdog caught collective operation timeout' & ;;
    kill9) freeze_or_kill kill9 KILL 29604 & watch_fatal kill9 'exitcode: -9|exitcode *: -9' & ;;
    silent)
      freeze_or_kill silent STOP 29609 monitoring.hang.scheduled_floor_s=15 \
        backend.megatron.distributed_timeout_minutes=5 &
      watch_fatal silent 'Watchdog caught collective operation timeout' & ;;
    loadfail) loadfail & watch_fatal loadfail 'Error|error|Exception' & ;;
    linger)
      # rank 1 raises at iteration 120 and its process stays (a non-daemon thread): rank 0 blocks in NCCL
      AUTOEXP_FAULT=raise_and_linger@120:1 AUTOEXP_FAULT_ONCE_FILE="$W/linger/fault_fired" \
        scenario linger 29606 &
      watch_fatal linger 'injected crash at iteration' & ;;
    burst)
      # rank 1 kills itself (SIGKILL, in process: exact) at iteration 91 of attempt 1, then 75, 85, 65 of the
      # next three (each resumed from 50); the last logged iterations 90, 70, 80, 60: new points, all short of 90
      AUTOEXP_FAULT=kill@91,75,85,65:1 AUTOEXP_FAULT_ONCE_FILE="$W/burst/fault_fired" scenario burst 29608 &
      watch_fatal burst 'Sending process [0-9]+ closing signal' & ;;
    guard)
      AUTOEXP_FAULT=guard@120:1 AUTOEXP_FAULT_ONCE_FILE="$W/guard/fault_fired" scenario guard 29610 &
      watch_fatal guard 'lost the connection to the data server' & ;;
    filegone)
      AUTOEXP_FAULT=file_gone@120:1 AUTOEXP_FAULT_ONCE_FILE="$W/filegone/fault_fired" scenario filegone 29611 &
      watch_fatal filegone 'FileNotFoundError' & ;;
    diskfull) diskfull & watch_fatal diskfull 'No space left|unexpected pos|write failed|Errno 28' & ;;
    *) echo "unknown scenario $s" >&2 ;;
  esac
done
wait

python3 scripts/device/megatron_results.py "$W" "$OUT/results"
tar -czf "$OUT/autoexp_logs.tar.gz" -C "$W" --exclude='*/outputs/megatron_tiny/checkpoints' \
  --exclude='*/state/autoexp.db-*' .
