"""The pre-flight check for real on one machine of several GPUs, in ONE call of the device tool.

    OUT=/tmp/out python3 scripts/device/preflight_gpus.py --nproc 2
    OUT=/tmp/out python3 scripts/device/preflight_gpus.py --nproc 2 --dry-run   # CPU: gloo, small sizes

Steps (each a subprocess with its own time limit; its exit status and output are kept):
  1. the acceptance suite, `torch.distributed.run --nproc_per_node=N`: its own bf16 GEMM figure
     per GPU and its all-reduce bus bandwidth across the N ranks (NCCL);
  2. the pre-flight as the batch script runs it (the shipped group's argv,
     config/preflight/default.yaml): one node, all N GPUs: GEMM TFLOP/s per GPU, HBM
     allocate-write-verify, the intra-node all-reduce bus bandwidth (torch.cuda.nccl, one process);
  3. the pre-flight as N "nodes" of one GPU each, started at once, with the cross-node `pairwise`
     check (NCCL point-to-point between the GPUs): all pass (the control);
  4. a concurrent bf16 GEMM loop on the last GPU (a GPU made slow), then (a) step 2 again: the slow
     GPU caught within the node (below 0.9 x the node's median) or by the floor; (b) step 3 again
     without floors: the slow GPU's "node" caught by the allocation's median, the others pass.
With --dry-run there is no GPU: the pre-flight takes its CPU path, the acceptance suite gloo, and
the slow "GPU" of step 4(b) is the test hook AUTOEXP_PREFLIGHT_SLOW_NODE (the load runs on the
CPU beside it). Only the plumbing is proven so.

$OUT gets preflight_gpus.json (every figure, each step's rc and seconds, the commit, a dirty flag),
preflight_gpus.md (the tables) and preflight_gpus.log (every command and its output).
NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends, set here for every child: KINDS.md).
Expected time on 2 H100s: about 1.5 min (mostly Python importing torch and creating CUDA contexts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
STEP_LIMIT_S = 90  # one step's subprocess (a hung NCCL call ends there, rc 124)
LOAD_READY_S = 90
FAIL_RE = re.compile(r"^preflight FAIL (?P<node>\S+): (?P<problem>.+)$", re.M)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="GPUs to use (0..N-1)")
    p.add_argument("--out", type=Path, default=os.environ.get("OUT"), help="default: $OUT")
    p.add_argument("--work", type=Path, default=Path("/tmp/preflight_gpus"))
    p.add_argument("--dry-run", action="store_true", help="no GPU: CPU paths, small sizes")
    p.add_argument("--limit-s", type=float, default=200, help="every step ends by then (the call's ~4 min)")
    args = p.parse_args(argv)
    if args.out is None:
        p.error("set OUT or pass --out")
    if args.nproc < 2:
        p.error("--nproc must be at least 2 (the all-reduce and the median need two)")
    return args


class Steps:
    """Runs each step as a subprocess; keeps its output, exit status and seconds."""

    def __init__(self, work: Path, log: Path, deadline: float) -> None:
        self.work, self.log, self.deadline = work, log, deadline
        self.ran: dict[str, dict[str, Any]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, **MULTICAST_OFF, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        self._say(f"$ {' '.join(argv)}   [{name}]")
        out = (self.work / f"{name}.out").open("wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.ran[name] = {"started": time.monotonic()}
        return proc

    def finish(self, name: str, proc: subprocess.Popen[bytes], limit_s: float = STEP_LIMIT_S) -> int:
        try:
            ends = min(self.ran[name]["started"] + limit_s, self.deadline)
            rc = proc.wait(timeout=max(ends - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = 124
        text = self.text(name)
        self.ran[name] = {"rc": rc, "seconds": round(time.monotonic() - self.ran[name]["started"], 1)}
        self._say(text.rstrip() + f"\n-> {name} rc={rc} in {self.ran[name]['seconds']} s")
        return rc

    def run(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        return self.finish(name, self.start(name, argv, env))

    def text(self, name: str) -> str:
        path = self.work / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def _say(self, text: str) -> None:
        print(text, flush=True)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(text + "\n")


def shipped_argv() -> list[str]:
    """The pre-flight's flags as the batch script gets them from config/preflight/default.yaml
    (plan/preflight_step.py itself where pydantic is installed; else the same flags from the YAML)."""
    import yaml

    data = yaml.safe_load((ROOT / "config/preflight/default.yaml").read_text())
    try:
        from oellm_autoexp.config.models import PreflightConfig
        from oellm_autoexp.plan.preflight_step import preflight_argv

        argv = list(preflight_argv(PreflightConfig.model_validate(data), "UNUSED")[3:])
    except ImportError:
        argv = ["--checks", ",".join(data["checks"]), "--relative-min", str(data["relative_min"]),
                "--budget-s", str(data["budget_s"]), "--gemm-size", str(data["gemm_size"]),
                "--gemm-iters", str(data["gemm_iters"]), "--hbm-gib", str(data["hbm_gib"]),
                "--allreduce-mb", str(data["allreduce_mb"])]  # fmt: skip
        for name, floor in sorted(data["min_gemm_tflops"].items()):
            argv += ["--min-gemm-tflops", f"{name}={floor}"]
    i = argv.index("--results-root") if "--results-root" in argv else -1
    return argv[:i] + argv[i + 2 :] if i >= 0 else argv


def without(argv: list[str], flag: str) -> list[str]:
    """`argv` without every `flag VALUE` pair."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        else:
            out.append(word)
    return out


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    return [*without(argv, flag), flag, value]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_json(work: Path, run: str, node: str) -> dict[str, Any] | None:
    path = work / "runs" / f"{run}.0" / f"{node}.json"
    return json.loads(path.read_text()) if path.exists() else None


def fails(text: str) -> list[str]:
    return [m[0] for m in FAIL_RE.finditer(text)]


class Proof:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.n, self.dry = args, args.nproc, args.dry_run
        self.work = args.work
        subprocess.run(["rm", "-rf", str(self.work)], check=False)
        (self.work / "runs").mkdir(parents=True)
        args.out.mkdir(parents=True, exist_ok=True)
        self.log = args.out / "preflight_gpus.log"
        self.log.write_text("")
        self.steps = Steps(self.work, self.log, time.monotonic() + args.limit_s)
        self.size = 256 if self.dry else 8192
        self.gpus = ",".join(str(i) for i in range(self.n))
        self.argv = shipped_argv()
        if self.dry:
            self.argv = with_value(self.argv, "--device", "cpu")
            self.argv = with_value(self.argv, "--checks", "gemm")
        self.argv = with_value(with_value(self.argv, "--gemm-size", str(self.size)), "--budget-s", "60")

    def preflight(self, run: str, node: str, nnodes: int, rank: int, argv: list[str],
                  **env: str) -> subprocess.Popen[bytes]:  # fmt: skip
        """One node of a pre-flight run, with the variables Slurm would set (results in work/runs/RUN.0)."""
        slurm = {"SLURM_JOB_ID": run, "SLURM_NNODES": str(nnodes), "SLURMD_NODENAME": node,
                 "SLURM_NODEID": str(rank), "SLURM_RESTART_COUNT": "0"}  # fmt: skip
        cmd = [sys.executable, "-m", "oellm_autoexp.workloads.preflight",
               "--results-root", str(self.work / "runs"), *argv]  # fmt: skip
        return self.steps.start(f"{run}-{node}", cmd, self.steps.env(**slurm, **env))

    def one_node(self, run: str) -> dict[str, Any]:
        """The pre-flight as one node holding every GPU."""
        name = f"{run}-node"
        rc = self.steps.finish(
            name, self.preflight(run, "node", 1, 0, self.argv, CUDA_VISIBLE_DEVICES=self.gpus)
        )
        return {"rc": rc, "result": node_json(self.work, run, "node"), "fail": fails(self.steps.text(name))}

    def per_gpu_nodes(self, run: str, argv: list[str], slow: str = "") -> dict[str, Any]:
        """N "nodes" of one GPU each, started at once; pairwise (NCCL, gloo on CPU) between them."""
        port = str(free_port() - 1)  # pairwise joins on MASTER_PORT + 1
        extra = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        if slow:
            extra["AUTOEXP_PREFLIGHT_SLOW_NODE"] = slow
        checks = argv[argv.index("--checks") + 1] if "--checks" in argv else "gemm"
        argv = with_value(argv, "--checks", f"{checks},pairwise")
        procs = {f"gpu{i}": self.preflight(run, f"gpu{i}", self.n, i, argv, CUDA_VISIBLE_DEVICES=str(i), **extra)
                 for i in range(self.n)}  # fmt: skip
        nodes = {}
        for node, proc in procs.items():
            rc = self.steps.finish(f"{run}-{node}", proc)
            nodes[node] = {"rc": rc, "result": node_json(self.work, run, node),
                           "fail": fails(self.steps.text(f"{run}-{node}"))}  # fmt: skip
        return nodes

    def acceptance(self) -> dict[str, Any]:
        report = self.work / "acceptance.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.n}",
               "-m", "oellm_autoexp.workloads.acceptance", "--report", str(report),
               "--gemm-size", str(self.size), "--gemm-iters", "50", "--train-steps", "50",
               "--allreduce-mb", "8" if self.dry else "256"]  # fmt: skip
        if self.dry:
            cmd += ["--device", "cpu"]
        rc = self.steps.run("acceptance", cmd, self.steps.env(CUDA_VISIBLE_DEVICES=self.gpus))
        data = json.loads(report.read_text()) if report.exists() else {}
        gemm = data.get("compute", {}).get("gemm", [])
        bf16 = {g["gpu"]: g["tflops"] for g in gemm if g.get("dtype") == "bf16"}
        ddp = data.get("ddp", {})
        return {"rc": rc, "bf16_tflops_per_gpu": [bf16.get(i) for i in range(self.n)] if bf16 else [],
                "allreduce_busbw_gbps": ddp.get("busbw_gbps"), "allreduce_bytes": ddp.get("allreduce_bytes"),
                "device": (gemm or [{}])[0].get("name", "cpu"), "result": data.get("result")}  # fmt: skip

    def start_load(self) -> subprocess.Popen[bytes]:
        """A bf16 GEMM loop on the last GPU (float32 on the CPU), until killed."""
        code = (
            "import sys, torch\n"
            "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
            "dt = torch.bfloat16 if dev == 'cuda' else torch.float32\n"
            "n = int(sys.argv[1]); a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn_like(a)\n"
            "print('load running on', dev, flush=True)\n"
            "while True:\n"
            "    for _ in range(20): torch.mm(a, b)\n"
            "    if dev == 'cuda': torch.cuda.synchronize()\n"
        )
        proc = self.steps.start("load", [sys.executable, "-c", code, str(self.size)],
                                self.steps.env(CUDA_VISIBLE_DEVICES=str(self.n - 1)))  # fmt: skip
        deadline = time.monotonic() + LOAD_READY_S
        while "load running" not in self.steps.text("load") and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        time.sleep(2)  # the loop is issuing work
        return proc

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        env = self.steps.env()
        self.steps.run("env", [sys.executable, "-c", ENV_CODE], env)
        result: dict[str, Any] = {"nproc": self.n, "dry_run": self.dry, "gemm_size": self.size,
                                  "argv": self.argv, **commit()}  # fmt: skip
        result["acceptance"] = self.acceptance()
        result["clean"] = self.one_node("clean")
        result["clean_nodes"] = self.per_gpu_nodes("pairs", self.argv)
        load = self.start_load()
        try:
            result["loaded"] = self.one_node("loaded")
            slow = f"gpu{self.n - 1}:0.01" if self.dry else ""  # no GPU to slow down: the hook's cut
            result["loaded_nodes"] = self.per_gpu_nodes("pairs_loaded", without(self.argv, "--min-gemm-tflops"),
                                                        slow=slow)  # fmt: skip
        finally:
            load.kill()
            self.steps.finish("load", load)
        result["verdicts"] = verdicts(result, self.n, self.dry)
        result["seconds"] = round(time.monotonic() - t0, 1)
        result["steps"] = self.steps.ran
        return result


ENV_CODE = """
import subprocess, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("nccl", torch.cuda.nccl.version())
    for i in range(torch.cuda.device_count()):
        print(i, torch.cuda.get_device_name(i))
    print(subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout)
"""


def commit() -> dict[str, Any]:
    def git(*argv: str) -> str:
        try:
            done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False)
        except OSError:
            return ""  # no git on the machine: the figures stand without the commit
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def verdicts(r: dict[str, Any], n: int, dry: bool) -> dict[str, Any]:
    """What the run proves, each a yes/no the tables show."""
    slow, others = f"gpu{n - 1}", [f"gpu{i}" for i in range(n - 1)]
    loaded_fail = " ".join(r["loaded"]["fail"])
    return {
        "clean_passes": r["clean"]["rc"] == 0,
        # Two CPU matmuls side by side on a shared VM can differ several-fold: on the CPU the control
        # is shown, not judged.
        "clean_nodes_pass": None if dry else all(v["rc"] == 0 for v in r["clean_nodes"].values()),
        # On a GPU: the slow GPU named within its node (or below the floor). On the CPU the one node
        # has no GPUs to compare, so only the per-GPU nodes below can show the catch.
        "slow_gpu_caught_in_node": None if dry else (r["loaded"]["rc"] == 1 and bool(loaded_fail)),
        "slow_gpu_named": None if dry else f"GPU {n - 1} " in loaded_fail or "< min" in loaded_fail,
        "slow_node_caught_by_median": r["loaded_nodes"][slow]["rc"] == 1
        and any("median" in f for f in r["loaded_nodes"][slow]["fail"]),
        "other_nodes_pass_beside_it": all(r["loaded_nodes"][o]["rc"] == 0 for o in others),
    }


def tables(r: dict[str, Any]) -> str:
    n, acc = r["nproc"], r["acceptance"]
    clean = r["clean"]["result"] or {}
    per_gpu = clean.get("gemm_per_gpu") or []
    unit = "GFLOP/s" if clean.get("gpu_name") == "cpu" else "TFLOP/s"
    lines = [
        f"# Pre-flight on {n} x {acc['device']} (commit {r['commit'][:12]}{' dirty' if r['dirty'] else ''}, "
        f"GEMM {r['gemm_size']}^3 {'fp32' if r['dry_run'] else 'bf16'}{', DRY RUN on the CPU' if r['dry_run'] else ''}); {r['seconds']} s in all",
        "",
        "| GPU | acceptance suite bf16 TFLOP/s | pre-flight TFLOP/s | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for i in range(n):
        a = acc["bf16_tflops_per_gpu"][i] if i < len(acc["bf16_tflops_per_gpu"]) else None
        p = per_gpu[i] if i < len(per_gpu) else None
        ratio = f"{p / a:.3f}" if a and p else "-"
        lines.append(f"| {i} | {fmt(a)} | {fmt(p)} | {ratio} |")
    if not per_gpu:
        lines.append(f"| cpu | - | {fmt(clean.get('gemm'))} {unit} | - |")
    lines += [
        "",
        f"HBM verify: {clean.get('hbm_ok')}; intra-node all-reduce bus bandwidth, {n} GPUs: pre-flight "
        f"(torch.cuda.nccl, one process) {fmt(clean.get('allreduce_gbps'))} GB/s; acceptance suite "
        f"({n} ranks, torch.distributed) {fmt(acc['allreduce_busbw_gbps'])} GB/s",
        "",
        "| run | node | rc | gemm | allreduce GB/s | pairwise GB/s | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in ("clean", "loaded"):
        lines.append(row(run, "node (all GPUs)", r[run]))
    for run in ("clean_nodes", "loaded_nodes"):
        for node, v in r[run].items():
            lines.append(row(run, node, v))
    lines += ["", "| proves | |", "| --- | --- |", *[f"| {k} | {v} |" for k, v in r["verdicts"].items()]]
    return "\n".join(lines) + "\n"


def row(run: str, node: str, v: dict[str, Any]) -> str:
    res = v["result"] or {}
    gemm = res.get("gemm_per_gpu") or ([res["gemm"]] if res.get("gemm") is not None else [])
    verdict = "; ".join(v["fail"]) or ("pass" if v["rc"] == 0 else f"rc {v['rc']}")
    return (f"| {run} | {node} | {v['rc']} | {' / '.join(fmt(g) for g in gemm) or '-'} | "
            f"{fmt(res.get('allreduce_gbps'))} | {fmt(res.get('pair_gbps'))} | {verdict} |")  # fmt: skip


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.update(MULTICAST_OFF)
    if not args.dry_run:
        import torch

        if torch.cuda.device_count() < args.nproc:
            print(f"needs {args.nproc} GPUs, sees {torch.cuda.device_count()} (use --dry-run without a GPU)")
            return 2
    result = Proof(args).run()
    (args.out / "preflight_gpus.json").write_text(json.dumps(result, indent=2) + "\n")
    md = tables(result)
    (args.out / "preflight_gpus.md").write_text(md)
    print(md)
    wanted = [v for v in result["verdicts"].values() if v is not None]
    return 0 if all(wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
