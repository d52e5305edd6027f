"""The config search path beyond --config-dir: config/ beside the experiment, the shipped groups,
and how `autoexp config show` reports where each key came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main
from oellm_autoexp.config.experiment import load_composed, load_root
from oellm_autoexp.config.loader import labelled_search_path, shipped_config_dir, with_experiment_dir
from oellm_autoexp.config.provenance import Provenance

EXPERIMENT = {"experiment": {"name": "exp", "output_dir": "out"}, "executor": "local"}


@pytest.fixture
def project(tmp_path: Path, config_dir: Path, write_yaml) -> Path:
    """A project directory: experiment.yaml with its own config/ beside it (slurm option `mine`)."""
    write_yaml(tmp_path / "proj" / "config" / "slurm" / "mine.yaml", {"nodes": 3, "cpus_per_task": 2})
    write_yaml(
        tmp_path / "proj" / "config" / "backend" / "command.yaml", {"kind": "command", "command": ["true"]}
    )
    defaults = [{"slurm": "mine"}, {"backend": "command"}, {"restart": "none"}]
    return write_yaml(tmp_path / "proj" / "experiment.yaml", {"defaults": defaults, **EXPERIMENT})


def test_groups_beside_the_experiment_are_found_without_config_dir(project: Path) -> None:
    """`config/` next to the experiment file supplies its groups; what it lacks comes from the shipped ones."""
    composed = load_composed(project)
    beside = project.parent / "config"
    assert composed.data["slurm"]["nodes"] == 3
    assert composed.provenance.source(("slurm", "nodes")) == str(beside / "slurm" / "mine.yaml")
    shipped_none = str(shipped_config_dir() / "restart" / "none.yaml")
    assert composed.provenance.source(("restart", "rules")) == shipped_none


def test_config_dir_wins_over_the_directory_beside_the_experiment(
    project: Path, config_dir: Path, write_yaml
) -> None:
    """--config-dir is searched first: its `slurm/mine.yaml` replaces the project's own."""
    write_yaml(config_dir / "slurm" / "mine.yaml", {"nodes": 5})
    assert load_root(project, config_dirs=[config_dir]).slurm.nodes == 5


def test_the_directory_beside_the_experiment_wins_over_the_shipped_groups(project: Path) -> None:
    """The project's `backend/command.yaml` replaces the shipped option of the same name."""
    assert load_root(project).backend.command == ["true"]


def test_beside_dir_goes_before_the_shipped_groups_once(tmp_path: Path, config_dir: Path) -> None:
    """with_experiment_dir inserts config/ before the shipped dir, and not at all when absent or present."""
    (tmp_path / "config").mkdir()
    experiment = tmp_path / "e.yaml"
    shipped = shipped_config_dir()
    assert with_experiment_dir([config_dir, shipped], experiment) == [
        config_dir,
        tmp_path / "config",
        shipped,
    ]
    assert with_experiment_dir([tmp_path / "config", shipped], experiment) == [tmp_path / "config", shipped]
    assert with_experiment_dir([shipped], tmp_path / "elsewhere" / "e.yaml") == [shipped]


def test_labelled_search_path_names_why_each_directory_is_searched(
    project: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--config-dir, then $AUTOEXP_CONFIG_DIR, then beside the experiment, then shipped."""
    monkeypatch.setenv("AUTOEXP_CONFIG_DIR", "/env/dir")
    labels = [label for label, _ in labelled_search_path([str(config_dir)], project)]
    assert labels == ["--config-dir", "$AUTOEXP_CONFIG_DIR", "beside the experiment", "shipped"]


def test_shipped_config_env_still_points_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$AUTOEXP_SHIPPED_CONFIG replaces the packaged or checkout groups."""
    monkeypatch.setenv("AUTOEXP_SHIPPED_CONFIG", str(tmp_path))
    assert shipped_config_dir() == tmp_path


def test_owners_folds_a_section_set_by_one_source() -> None:
    """A section whose keys all came from one file is one entry; a mixed one is split key by key."""
    prov = Provenance(default="exp.yaml")
    prov.record(("slurm", "nodes"), "slurm.yaml")
    prov.record(("slurm", "sbatch", "time"), "slurm.yaml")
    prov.record(("slurm", "sbatch", "qos"), "command line")
    prov.record(("restart",), "restart.yaml")
    data = {
        "slurm": {"nodes": 1, "sbatch": {"time": "1:00", "qos": "x"}},
        "restart": {"rules": []},
        "executor": "local",
    }
    assert prov.owners(data) == [
        (("slurm", "nodes"), "slurm.yaml"),
        (("slurm", "sbatch", "time"), "slurm.yaml"),
        (("slurm", "sbatch", "qos"), "command line"),
        (("restart",), "restart.yaml"),
        (("executor",), "exp.yaml"),
    ]


def test_config_show_says_where_each_group_came_from(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the YAML, comments name each group file with the search-path entry that held it."""
    assert main(["config", "show", str(project), "slurm.nodes=4"]) == 0
    out = capsys.readouterr().out
    beside = project.parent / "config"
    assert (
        f"# slurm: mine (beside the experiment: {beside / 'slurm' / 'mine.yaml'})\n#     slurm.cpus_per_task\n"
        in out
    )
    assert f"# restart: none (shipped: {shipped_config_dir() / 'restart' / 'none.yaml'})" in out
    assert out.rstrip().endswith("# command line\n#     slurm.nodes")
