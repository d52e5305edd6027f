"""`autoexp init`: the starter files, what they compose to, and that nothing is ever overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from oellm_autoexp import __version__
from oellm_autoexp.cli._starter import FILES
from oellm_autoexp.cli.main import build_parser, main
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans


def test_init_writes_the_starter_files(
    tmp_path: Path, config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every starter file lands under DIR, and the output says how to run the experiment."""
    assert main(["init", str(tmp_path / "proj")]) == 0
    for name, text in FILES.items():
        assert (tmp_path / "proj" / name).read_text() == text
    assert f"cd {tmp_path / 'proj'} && autoexp run experiment.yaml" in capsys.readouterr().out


def test_init_refuses_to_overwrite_and_writes_nothing(
    tmp_path: Path, config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One existing target file: exit 2, the message names it, no other file is written."""
    existing = tmp_path / "config" / "slurm" / "my_cluster.yaml"
    existing.parent.mkdir(parents=True)
    existing.write_text("mine\n")
    assert main(["init", str(tmp_path)]) == 2
    assert f"{existing}: already exists" in capsys.readouterr().err
    assert existing.read_text() == "mine\n"
    assert not (tmp_path / "experiment.yaml").exists()


def test_the_starter_is_a_local_resumable_training_run(tmp_path: Path, config_dir: Path) -> None:
    """The starter composes from shipped groups: local executor, the train workload, a restart policy."""
    main(["init", str(tmp_path)])
    [job] = load_jobs(tmp_path / "experiment.yaml")
    assert job.config.executor == "local"
    assert job.config.backend.command[:3] == ["python", "-m", "oellm_autoexp.workloads.train"]
    assert [rule["name"] for rule in job.config.restart["rules"]][:3] == [
        "preflight",
        "megatron_rerun",
        "megatron_validation_failed",
    ]


def test_the_starter_switches_to_slurm_with_the_preset_beside_it(tmp_path: Path, config_dir: Path) -> None:
    """`executor=slurm slurm=my_cluster`, as its comments say, plans an sbatch script from config/slurm/."""
    main(["init", str(tmp_path)])
    jobs = load_jobs(tmp_path / "experiment.yaml", ["executor=slurm", "slurm=my_cluster"])
    [plan] = build_plans(jobs, str(tmp_path))
    assert plan.executor == "slurm"
    assert "#SBATCH --partition=batch" in plan.script
    assert "#SBATCH --time=00:30:00" in plan.script


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`autoexp --version` prints the version the wheel's metadata carries, and exits 0 (answered
    before argparse is imported; after a global option too, and argparse's own answer is the same)."""
    assert main(["--version"]) == 0
    assert main(["--state-dir", "x", "--version", "status"]) == 0
    assert capsys.readouterr().out == f"autoexp {__version__}\n" * 2
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version"])  # argparse's own version action
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"autoexp {__version__}\n"
