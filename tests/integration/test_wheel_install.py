"""The built wheel, installed into a new virtual environment outside the checkout, works on its own:
`autoexp init`, `autoexp plan` of an experiment on the shipped groups, `autoexp run` of the starter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from oellm_autoexp import __version__

REPO_ROOT = Path(__file__).resolve().parents[2]
# What a source checkout contributes to a wheel; tests, scripts and docs stay behind.
BUILD_INPUTS = ("oellm_autoexp", "config", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
STEP_TIMEOUT_S = 240
MEGATRON_EXPERIMENT = """\
defaults:
  - backend: megatron_torchrun
  - slurm: juwels
  - monitoring: megatron_production
  - restart: megatron_transient
experiment:
  name: llama_tiny
  output_dir: outputs/${experiment.name}
executor: slurm
backend:
  megatron:
    num_layers: 2
slurm:
  nodes: 2
"""

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def _run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str]) -> str:
    """stdout+stderr of a command that must succeed (the output is in the failure message)."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{output}"
    return output


def _build_wheel(tmp_path: Path) -> Path:
    """Build from a copy of the build inputs, so that no build/ or egg-info lands in the checkout."""
    source = tmp_path / "src"
    for name in BUILD_INPUTS:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source],
        tmp_path,
        dict(os.environ),
    )
    [wheel] = dist.glob("oellm_autoexp-*.whl")
    return wheel


def _clean_env(venv: Path) -> dict[str, str]:
    """The environment of a user with the venv first on PATH and nothing pointing into the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOEXP_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    # The shipped juwels preset and the Megatron backend read these when the experiment is loaded.
    env.update(SLURM_ACCOUNT="demo_account", MEGATRON_PATH="/opt/Megatron-LM")
    return env


def _checkout_roots(env: dict[str, str], cwd: Path) -> set[str]:
    """This checkout, and wherever the interpreter running the tests would import the package from."""
    code = "import oellm_autoexp, pathlib; print(pathlib.Path(oellm_autoexp.__file__).resolve().parents[1])"
    system = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    return {str(REPO_ROOT), *(line for line in system.stdout.split() if line)} - {""}


def test_wheel_installed_outside_the_checkout_plans_and_runs(tmp_path: Path) -> None:
    """No path into the checkout reaches the installed tool: its package, groups, outputs and scripts."""
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "oellm_autoexp/_shipped/slurm/juwels.yaml" in names
    assert "oellm_autoexp/_shipped/monitoring/vocabulary.json" in names  # the word model guesses come from
    assert "oellm_autoexp/core/templates/sbatch.sh.j2" in names
    metadata = zipfile.ZipFile(wheel).read(f"oellm_autoexp-{__version__}.dist-info/METADATA").decode()
    assert "Provides-Extra: torch" in metadata
    assert not any(
        line.startswith("Requires-Dist: torch") and "extra ==" not in line for line in metadata.splitlines()
    )

    venv = tmp_path / "venv"
    # System site packages bring torch (for the workload) and the dependencies, already installed.
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv], tmp_path, dict(os.environ))
    env = _clean_env(venv)
    home = tmp_path / "home"
    home.mkdir()
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], home, env)

    package, shipped = _run([venv / "bin" / "python", "-c", _WHERE], home, env).split()
    assert Path(package).is_relative_to(venv) and Path(shipped).is_relative_to(venv), (package, shipped)
    assert _run(["autoexp", "--version"], home, env).strip() == f"autoexp {__version__}"

    outputs = [_run(["autoexp", "init", "proj"], home, env)]
    project = home / "proj"
    (project / "llama.yaml").write_text(MEGATRON_EXPERIMENT)
    outputs.append(_run(["autoexp", "plan", "llama.yaml", "--scripts"], project, env))
    assert "#SBATCH --nodes=2" in outputs[-1]
    outputs.append(_run(["autoexp", "config", "show", "llama.yaml"], project, env))
    assert f"restart: megatron_transient (shipped: {shipped}/restart/megatron_transient.yaml)" in outputs[-1]
    outputs.append(
        _run(["autoexp", "plan", "experiment.yaml", "executor=slurm", "slurm=my_cluster"], project, env)
    )
    outputs.append(_run(["autoexp", "run", "experiment.yaml"], project, env))
    assert "Job completed successfully" in outputs[-1]
    assert "successfully saved checkpoint from iteration 20" in outputs[-1]

    written = [
        p.read_text(errors="replace") for p in sorted(project.rglob("*")) if p.is_file() and p.suffix != ".db"
    ]
    for root in _checkout_roots(env, home):
        assert not [text for text in [*outputs, *written] if root in text], f"{root} leaked into outputs"


# Where the venv's interpreter imports the package from, and where it finds the shipped groups.
_WHERE = """
import oellm_autoexp
from oellm_autoexp.config.loader import shipped_config_dir
print(oellm_autoexp.__file__, shipped_config_dir())
"""
