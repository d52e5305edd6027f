"""Bad input: one clear message naming the file and the key path (and close matches), exit 2.

Each case is checked twice: load_jobs raises UserError with the expected pieces, and the
`autoexp submit` command exits 2 without a traceback and without submitting anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.errors import UserError

GOOD = {
    "defaults": [{"backend": "cmd"}],
    "experiment": {"name": "exp", "output_dir": "out"},
    "executor": "local",
}

# (name, experiment changes, overrides, pieces the message must contain)
CASES = [
    ("unknown key", {"slurm": {"nodez": 2}}, [], ["e.yaml", "slurm.nodez", "close matches: nodes"]),
    ("unknown top-level key", {"experimnt": {}}, [], ["e.yaml", "experimnt", "close matches: experiment"]),
    (
        "unknown key in a group file",
        {"defaults": [{"backend": "typo"}]},
        [],
        ["typo.yaml", "backend.comand", "command"],
    ),
    ("wrong type", {"slurm": {"nodes": "many"}}, [], ["e.yaml", "slurm.nodes", "integer"]),
    ("wrong type from the command line", {}, ["slurm.nodes=many"], ["command line", "slurm.nodes"]),
    ("missing group", {"defaults": [{"slurmm": "x"}]}, [], ["e.yaml", "slurmm", "close matches: slurm"]),
    ("missing group option", {"defaults": [{"backend": "cmdd"}]}, [], ["e.yaml", "backend", "'cmdd'", "cmd"]),
    (
        "zero-point sweep",
        {"sweep": {"grid": {"slurm.nodes": []}}},
        [],
        ["e.yaml", "sweep.grid.slurm.nodes", "zero"],
    ),
    ("empty sweep", {"sweep": {}}, [], ["e.yaml", "sweep", "zero points"]),
    (
        "override of a missing key",
        {},
        ["slurm.nodez=2"],
        ["command line", "slurm.nodez", "close matches: nodes"],
    ),
    (
        "override into a free mapping",
        {},
        ["slurm.env.FOOO=1"],
        ["command line", "slurm.env.FOOO", "+slurm.env"],
    ),
    (
        "sweep over a missing key",
        {"sweep": {"grid": {"slurm.nodez": [1]}}},
        [],
        ["sweep point", "slurm.nodez"],
    ),
    (
        "missing env var",
        {"experiment": {"name": "${oc.env:AUTOEXP_NOPE}", "output_dir": "o"}},
        [],
        ["e.yaml", "experiment.name", "AUTOEXP_NOPE"],
    ),
    (
        "dangling reference",
        {"experiment": {"name": "${experiment.nam}", "output_dir": "o"}},
        [],
        ["e.yaml", "experiment.name", "experiment.nam", "close matches: name"],
    ),
    (
        "missing required key",
        {"defaults": [], "backend": {"kind": "command"}},
        [],
        ["e.yaml", "backend.command", "missing"],
    ),
    (
        "newline in a job name",
        {"experiment": {"name": "a\nb", "output_dir": "o"}},
        [],
        ["experiment.name", "newline"],
    ),
    ("bad backend kind", {"backend": {"kind": "nope"}}, [], ["backend", "nope"]),
    (
        "megatron save is ours",
        {"defaults": [{"backend": "meg"}], "backend": {"megatron": {"save": "/x"}}},
        [],
        ["backend.megatron", "checkpoint dir"],
    ),
    ("multi-node on the local executor", {"slurm": {"nodes": 2}}, [], ["slurm.nodes", "local executor"]),
    ("bad override syntax", {}, ["slurm.nodes"], ["command line", "key.path=value"]),
]


@pytest.fixture
def bad_config(config_dir: Path, write_yaml):
    """Builds tmp configs: a good experiment with `changes` merged at the top level."""
    write_yaml(config_dir / "backend" / "cmd.yaml", {"kind": "command", "command": ["true"]})
    write_yaml(config_dir / "backend" / "typo.yaml", {"kind": "command", "comand": ["true"]})
    write_yaml(config_dir / "backend" / "meg.yaml", {"kind": "megatron_torchrun", "megatron_path": "/m"})

    def build(changes: dict) -> Path:
        return write_yaml(config_dir / "experiments" / "e.yaml", {**GOOD, **changes})

    return build


@pytest.mark.parametrize(("name", "changes", "overrides", "pieces"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_file_and_key(bad_config, config_dir, name, changes, overrides, pieces) -> None:
    """The UserError message carries the file, the key path and, for typos, the close matches."""
    exp = bad_config(changes)
    with pytest.raises(UserError) as caught:
        from oellm_autoexp.plan.plan import build_plans

        build_plans(load_jobs(exp, overrides, [config_dir], environ={}), "/base")
    message = str(caught.value)
    for piece in pieces:
        assert piece in message, f"{name}: {piece!r} not in {message!r}"
    assert "\n" not in message


@pytest.mark.parametrize(("name", "changes", "overrides", "pieces"), CASES[:6], ids=[c[0] for c in CASES[:6]])
def test_cli_exits_2_without_traceback_and_submits_nothing(
    bad_config, config_dir, tmp_path, capsys, monkeypatch, name, changes, overrides, pieces
) -> None:
    """`autoexp submit` on bad input: exit 2, one `autoexp: error:` line, no job directory or state."""
    monkeypatch.chdir(tmp_path)
    exp = bad_config(changes)
    state = tmp_path / "state"
    code = main(["--state-dir", str(state), "submit", str(exp), *overrides, "--config-dir", str(config_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("autoexp: error: ") and "Traceback" not in err
    assert not state.exists() and not (tmp_path / "out").exists()


def test_missing_experiment_file_exits_2(tmp_path, capsys) -> None:
    """A config path that does not exist is named in the message."""
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_invalid_yaml_names_the_line(config_dir, capsys) -> None:
    """A YAML syntax error gives file:line."""
    bad = config_dir / "bad.yaml"
    bad.write_text("experiment:\n  name: [unclosed\n")
    assert main(["plan", str(bad)]) == 2
    assert f"{bad}:" in capsys.readouterr().err
