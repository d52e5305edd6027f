# Shell helpers shared by the device scripts; source it from the script's own folder, before any cd:
#   . "$(dirname "$0")/lib.sh"
# Sourcing it sets the NCCL environment every GPU run uses (below).
# shellcheck shell=bash

# NVLink multicast (NVLS) off in NCCL, torch's symmetric memory and NVSHMEM: on the lent GPU
# machines a program that uses it can put the host's shared GPUs out of service. Every script
# that sources this file runs with these set, and so does everything it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# use_wheels ROOT: the monitor's own dependencies (the GPU machines have torch, not pydantic &c.)
# installed from the wheels in ./.whl into /tmp/site when they cannot be imported; then
# PYTHONPATH=/tmp/site:ROOT and unbuffered Python output.
use_wheels() {
  if [ -d .whl ] && ! python3 -c 'import pydantic, sqlalchemy, apscheduler, watchdog' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  export PYTHONPATH="/tmp/site:$1" PYTHONUNBUFFERED=1
}

# env_report FILE: the date, the GPUs and torch's CUDA and NCCL versions, into FILE.
env_report() {
  { date -u; nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'; } > "$1" 2>&1
}

# wait_for FILE REGEX LIMIT_S: until a line of FILE matches REGEX (0), or LIMIT_S passed (1).
# Polls every 0.5 s; a FILE not written yet counts as no match.
wait_for() {
  local t=0
  until grep -Eq "$2" "$1" 2>/dev/null; do
    sleep 0.5; t=$((t + 1))
    if [ "$t" -ge $(( $3 * 2 )) ]; then return 1; fi
  done
  return 0  # (an until loop's status is its body's last one, not the condition's)
}
