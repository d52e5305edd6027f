#!/usr/bin/env bash
# The walltime path of a rendered megatron_torchrun job, without a monitor, on a 2-GPU machine:
# the job script `autoexp plan` renders for config/experiments/megatron_tiny_local.yaml runs as
# the local executor runs it (no Slurm); at iteration 100 its batch shell gets SIGUSR1, as from
# `--signal=B:USR1@N`. The shell forwards it, each node's wrapper sends SIGTERM to the ranks
# alone, Megatron (--exit-signal-handler) saves and exits 0. The same script again resumes from
# that checkpoint and finishes. Beside it, a diagnostic: the OOM case of megatron_suite.sh with
# Python's faulthandler on, and SIGABRT to rank 0 20 s after its OOM line, to show where a rank
# that has raised OutOfMemoryError stays (it did not exit in megatron_suite.sh).
#
#   OUT=/tmp/out scripts/device/megatron_walltime.sh   # logs.tar.gz, summary.txt into $OUT
set -uo pipefail

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off), wait_for
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT to the folder that comes back}
W=.megatron_walltime
L=$W/logs
rm -rf "$W" && mkdir -p "$L" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

python3 - "$W" <<'EOF'
import sys
from pathlib import Path
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans
(plan,) = build_plans(load_jobs(Path("config/experiments/megatron_tiny_local.yaml"),
                                ["slurm.master_port=29650"], environ={}), sys.argv[1])
Path(plan.script_path).parent.mkdir(parents=True, exist_ok=True)
Path(plan.script_path).write_text(plan.script)
print(plan.script_path)
EOF
JOB=$W/outputs/megatron_tiny/job.sbatch

walltime() {
  local t0=$SECONDS
  bash "$JOB" > "$L/walltime_usr1.log" 2>&1 &
  local shell=$!
  if wait_for "$L/walltime_usr1.log" 'iteration +100/' 150; then
    echo "[walltime] $(date -u +%T) kill -USR1 $shell (the batch shell)" >> "$L/walltime.signals.txt"
    kill -USR1 "$shell"
  fi
  wait "$shell"
  echo "walltime_usr1 rc=$? seconds=$((SECONDS - t0))" | tee -a "$L/cases.txt"
  t0=$SECONDS
  timeout -k 10 150 bash "$JOB" > "$L/walltime_resume.log" 2>&1
  echo "walltime_resume rc=$? seconds=$((SECONDS - t0))" | tee -a "$L/cases.txt"
}

oom_stacks() {
  local t0=$SECONDS log=$L/oom_hang_stacks.log
  PYTHONFAULTHANDLER=1 timeout -k 10 150 torchrun --standalone --nproc_per_node=2 \
    -m oellm_autoexp.workloads.megatron_gpt $(python3 - <<'EOF'
import yaml
opts = yaml.safe_load(open("config/backend/megatron/tiny_gpt.yaml"))
opts.update(seq_length=8192, max_position_embeddings=8192, micro_batch_size=256, global_batch_size=512,
            no_create_attention_mask_in_dataloader=True, exit_signal_handler=True, train_iters=100)
print(" ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in opts.items()))
EOF
) --save "$W/ck_oom" --load "$W/ck_oom" > "$log" 2>&1 &
  local runner=$!
  if wait_for "$log" 'OutOfMemoryError' 120; then
    sleep 20
    local pid
    pid=$(python3 scripts/device/rank_pid.py "--save $W/ck_oom " 0) && kill -ABRT "$pid" \
      && echo "[oom_stacks] $(date -u +%T) kill -ABRT $pid (rank 0), 20 s after its OOM line" >> "$L/oom.signals.txt"
  fi
  wait "$runner"
  echo "oom_hang_stacks rc=$? seconds=$((SECONDS - t0))" | tee -a "$L/cases.txt"
}

walltime &
oom_stacks &
wait
tar -czf "$OUT/logs.tar.gz" -C "$W" logs
{
  cat "$L/cases.txt" "$L"/*.signals.txt
  for f in "$L"/*.log; do
    echo "--- $(basename "$f"): $(wc -l < "$f") lines"
    grep -E 'autoexp:|exiting program|successfully (saved|loaded)|Fatal Python|Thread 0x|File ".*(megatron|torch)/' "$f" \
      | cut -c1-200 | head -n 40
  done
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
