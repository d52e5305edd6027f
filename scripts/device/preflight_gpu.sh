#!/usr/bin/env bash
# The pre-flight check (docs/preflight.md) on a real GPU, in ONE call of the device tool:
#   1. the acceptance suite's own bf16 GEMM figure (workloads/acceptance.py, one process);
#   2. the pre-flight as the batch script runs it, with the shipped group's floors
#      (config/preflight/default.yaml -> plan/preflight_step.py): figures beside (1);
#   3. the same with a concurrent bf16 GEMM loop on the same GPU (a "slow" GPU): caught by the
#      absolute floor (one node), and by the median when judged beside the clean result of (2)
#      as a second node;
#   4. a control: the clean GPU judged beside its own earlier figure passes.
# Results in $OUT: preflight_gpu.json (every figure, the commit, a dirty flag), preflight_gpu.md
# (the table), preflight_gpu.log (every command's output).
#
#   OUT=/tmp/out scripts/device/preflight_gpu.sh
#   QUICK=1 OUT=/tmp/out scripts/device/preflight_gpu.sh    # CPU dry run (no GPU: the CPU fallback)
#
# Timing on one H100/H200: ~1.5 min (each step starts a Python with torch; the load runs ~60 s).
set -uo pipefail  # no -e: a failing check is one of the expected results; each rc is recorded

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off); use_wheels, wait_for
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT to the folder that comes back}
QUICK=${QUICK:-0}
W=.preflight_gpu   # relative, so paths printed in logs are relative too
rm -rf "$W" && mkdir -p "$W" "$OUT"
LOG=$OUT/preflight_gpu.log
: > "$LOG"

use_wheels "$ROOT"  # PYTHONPATH, unbuffered output
# One GPU: the pre-flight measures every visible device; the load must share that one.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

if [ "$QUICK" = 1 ]; then SIZE=256; ITERS=2; LOAD_S=20; else SIZE=8192; ITERS=100; LOAD_S=90; fi

# run NAME CMD...: CMD's output to $W/NAME.out and the log; its rc to $W/NAME.rc.
run() {
  local name=$1; shift
  echo "\$ $*" | tee -a "$LOG"
  "$@" > "$W/$name.out" 2>&1
  local rc=$?
  echo "$rc" > "$W/$name.rc"
  cat "$W/$name.out" >> "$LOG"
  echo "-> $name rc=$rc" | tee -a "$LOG"
}

# The pre-flight's argv exactly as the batch script gets it, from the shipped group.
# (With pydantic, from .whl as for gpu_autoexp.sh, it is plan/preflight_step.py's own argv;
# without it, the same flags read from the YAML here.)
mapfile -t PREFLIGHT < <(python3 - <<'PY'
import yaml
data = yaml.safe_load(open("config/preflight/default.yaml"))
try:
    from oellm_autoexp.config.models import PreflightConfig
    from oellm_autoexp.plan.preflight_step import preflight_argv
    argv = list(preflight_argv(PreflightConfig.model_validate(data), "UNUSED")[3:])  # drop `python3 -m M`
except ImportError:
    argv = ["--checks", ",".join(data["checks"]), "--relative-min", str(data["relative_min"]),
            "--budget-s", str(data["budget_s"]), "--gemm-iters", str(data["gemm_iters"]),
            "--hbm-gib", str(data["hbm_gib"]), "--allreduce-mb", str(data["allreduce_mb"])]
    for name, floor in sorted(data["min_gemm_tflops"].items()):
        argv += ["--min-gemm-tflops", f"{name}={floor}"]
for word in argv:
    print(word)
PY
)
strip_root() {  # the argv without --results-root X
  local out=() skip=0
  for w in "${PREFLIGHT[@]}"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    if [ "$w" = --results-root ]; then skip=1; continue; fi
    out+=("$w")
  done
  printf '%s\n' "${out[@]}"
}
mapfile -t ARGS < <(strip_root)
# The same without the absolute floors: the median alone judges (step 3b, step 4).
NOFLOOR=()
for ((i = 0; i < ${#ARGS[@]}; i++)); do
  if [ "${ARGS[i]}" = --min-gemm-tflops ]; then i=$((i + 1)); continue; fi
  NOFLOOR+=("${ARGS[i]}")
done
preflight() {  # preflight NAME NODE NNODES ARGV_VAR [extra args]: one "node" of a run in $W/runs/NAME.0
  local name=$1 node=$2 nnodes=$3; local -n argv=$4; shift 4
  SLURM_JOB_ID=$name SLURM_NNODES=$nnodes SLURMD_NODENAME=$node SLURM_NODEID=0 \
    run "$name" python3 -m oellm_autoexp.workloads.preflight --results-root "$W/runs" "${argv[@]}" "$@"
}

{ date -u; nvidia-smi || true; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'; } >> "$LOG" 2>&1

echo "== 1. the acceptance suite's bf16 GEMM" | tee -a "$LOG"
run acceptance python3 -m oellm_autoexp.workloads.acceptance --report "$W/acceptance.json" \
  --gemm-size "$SIZE" --gemm-iters "$ITERS" --train-steps 50

echo "== 2. pre-flight, clean GPU" | tee -a "$LOG"
preflight clean gpu-clean 1 ARGS --gemm-size "$SIZE"

echo "== 3. pre-flight with a concurrent GEMM loop on the same GPU" | tee -a "$LOG"
python3 - "$SIZE" "$LOAD_S" > "$W/load.out" 2>&1 <<'PY' &
import sys, time, torch
n, limit = int(sys.argv[1]), float(sys.argv[2])
dev = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if dev == "cuda" else torch.float32
a = torch.randn(n, n, device=dev, dtype=dtype); b = torch.randn(n, n, device=dev, dtype=dtype)
print("load running on", dev, flush=True)
end = time.monotonic() + limit
while time.monotonic() < end:
    for _ in range(20):
        torch.mm(a, b)
    if dev == "cuda":
        torch.cuda.synchronize()
PY
LOAD=$!
wait_for "$W/load.out" 'load running' 120 || echo "load did not start" | tee -a "$LOG"
sleep 3
# (a) one node: only the floors judge it.
preflight loaded gpu-loaded 1 ARGS --gemm-size "$SIZE"
# (b) two nodes, no floors: the clean figure of step 2 as the other node's result; the median judges.
mkdir -p "$W/runs/loaded_vs_clean.0"
cp "$W/runs/clean.0/gpu-clean.json" "$W/runs/loaded_vs_clean.0/gpu-clean.json"
preflight loaded_vs_clean gpu-loaded 2 NOFLOOR --gemm-size "$SIZE"
kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null

echo "== 4. control: the clean GPU again, beside its own earlier figure" | tee -a "$LOG"
mkdir -p "$W/runs/clean_vs_clean.0"
cp "$W/runs/clean.0/gpu-clean.json" "$W/runs/clean_vs_clean.0/gpu-clean.json"
preflight clean_vs_clean gpu-again 2 NOFLOOR --gemm-size "$SIZE"

python3 - "$W" "$OUT" "$SIZE" <<'PY'
import json, pathlib, re, subprocess, sys
w, out, size = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
def rc(name): return int((w / f"{name}.rc").read_text())
def text(name): return (w / f"{name}.out").read_text(errors="replace")
def figure(name):
    m = re.search(r"^preflight \S+: gemm ([\d.]+) ([TG]FLOP/s)", text(name), re.M)
    return (float(m[1]), m[2]) if m else (None, None)
def fail(name):
    m = re.search(r"^(preflight FAIL .*)$", text(name), re.M)
    return m[1] if m else None
acc = json.loads((w / "acceptance.json").read_text()) if (w / "acceptance.json").exists() else {}
acc_bf16 = [g["tflops"] for g in acc.get("compute", {}).get("gemm", []) if g["dtype"] == "bf16"]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip())
runs = {}
for name in ("clean", "loaded", "loaded_vs_clean", "clean_vs_clean"):
    value, unit = figure(name)
    runs[name] = {"rc": rc(name), "gemm": value, "unit": unit, "fail_line": fail(name)}
clean = runs["clean"]["gemm"]
result = {
    "commit": commit, "dirty": dirty, "gemm_size": size,
    "device": (acc.get("compute", {}).get("gemm") or [{}])[0].get("name", "cpu"),
    "acceptance_bf16_tflops": acc_bf16[0] if acc_bf16 else None,
    "preflight_vs_acceptance": (clean / acc_bf16[0]) if clean and acc_bf16 else None,
    "runs": runs,
    "caught_by_floor": runs["loaded"]["rc"] == 1 and runs["loaded"]["fail_line"] is not None,
    "caught_by_median": runs["loaded_vs_clean"]["rc"] == 1 and "median" in (runs["loaded_vs_clean"]["fail_line"] or ""),
    "control_passes": runs["clean_vs_clean"]["rc"] == 0,
}
(out / "preflight_gpu.json").write_text(json.dumps(result, indent=2) + "\n")
rows = [f"| {n} | {r['gemm']} {r['unit'] or ''} | {r['rc']} | {r['fail_line'] or 'pass'} |" for n, r in runs.items()]
md = "\n".join([
    f"# Pre-flight on {result['device']} (commit {commit[:12]}{' dirty' if dirty else ''}, GEMM {size}^3 bf16)",
    "",
    f"acceptance suite bf16 GEMM: {result['acceptance_bf16_tflops']} TFLOP/s; pre-flight clean: {clean} "
    f"(ratio {result['preflight_vs_acceptance']})",
    "",
    "| run | gemm | rc | verdict |", "| --- | --- | --- | --- |", *rows, "",
    f"caught by the floor: {result['caught_by_floor']}; by the median: {result['caught_by_median']}; "
    f"control passes: {result['control_passes']}",
])
(out / "preflight_gpu.md").write_text(md + "\n")
print(md)
PY
