"""scripts/device/lib.sh, the preamble every GPU script sources: NVLink multicast off (the lent
machines' rule), the monitor's dependencies from carried wheels, and the scripts parse. Dry: no
GPU, no pip (a stand-in python3 on PATH records what would run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

DEVICE = REPO / "scripts" / "device"
LIB = DEVICE / "lib.sh"
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
CPU_ONLY = {"lib.sh", "slurm_kit.sh", "bench_poll_1000.sh"}  # no torch: nothing of NCCL to set
PIP = "-m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site"


def _bash(script: str, cwd: Path, path: str = "/usr/bin:/bin") -> dict[str, str]:
    """`env` after running `script` in a bash with nothing inherited but PATH."""
    done = subprocess.run(["env", "-i", f"PATH={path}", "bash", "-c", f"{script}\nenv"], cwd=cwd,
                          capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


@pytest.mark.parametrize("script", sorted(p.name for p in DEVICE.glob("*.sh")))
def test_every_device_script_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(DEVICE / script)], check=False, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_sourcing_it_sets_the_nccl_environment_and_nothing_else(tmp_path: Path) -> None:
    before = _bash("true", tmp_path)
    after = _bash(f". {LIB}", tmp_path)
    assert {k: v for k, v in after.items() if before.get(k) != v} == NCCL_ENV


@pytest.mark.parametrize("script", sorted(p.name for p in DEVICE.glob("*.sh") if p.name not in CPU_ONLY))
def test_every_gpu_script_sources_it_before_leaving_its_folder(script: str) -> None:
    """Sourced by the script's own path, so before the first `cd`; the NCCL line lives only there."""
    lines = (DEVICE / script).read_text().splitlines()
    sourced = [i for i, line in enumerate(lines) if line.startswith('. "$(dirname "$0")/lib.sh"')]
    moved = [i for i, line in enumerate(lines) if line.startswith(("cd ", "ROOT=$(cd"))]
    assert sourced and sourced[0] < min(moved, default=len(lines)), script
    assert not any("NCCL_NVLS_ENABLE" in line for line in lines), script


def _fake_python(bindir: Path, importable: bool) -> Path:
    """A python3 whose imports fail unless `importable`, logging every pip call."""
    calls = bindir / "calls.txt"
    bindir.mkdir()
    fake = bindir / "python3"
    fake.write_text(
        f'#!/bin/bash\nif [ "$1" = -c ]; then exit {0 if importable else 1}; fi\necho "$*" >> {calls}\n'
    )
    fake.chmod(0o755)
    return calls


@pytest.mark.parametrize("importable", [False, True])
def test_use_wheels_installs_only_what_cannot_be_imported(tmp_path: Path, importable: bool) -> None:
    """With .whl carried and the dependencies missing: one pip install into /tmp/site, the same
    command line the scripts ran before; found already: none. PYTHONPATH names /tmp/site first."""
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "a-1-py3-none-any.whl").write_text("")
    calls = _fake_python(tmp_path / "bin", importable)
    env = _bash(f". {LIB}\nuse_wheels /repo", tmp_path, path=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert env["PYTHONPATH"] == "/tmp/site:/repo" and env["PYTHONUNBUFFERED"] == "1"
    ran = calls.read_text().splitlines() if calls.exists() else []
    assert ran == ([] if importable else [f"{PIP} .whl/a-1-py3-none-any.whl"])
