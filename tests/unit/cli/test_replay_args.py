"""`autoexp replay` (and every command with a list of words) takes KEY=VALUE overrides wherever
they stand among the options: `--between linear LOG k=v`, `LOG --between linear k=v`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oellm_autoexp.cli.main import build_parser, main, parse_intermixed

LOG = (
    " [2026-01-01 00:00:01] iteration 1/ 100 | lm loss: 2.0 |\ntorch.OutOfMemoryError: CUDA out of memory.\n"
)


def _args(argv: list[str]) -> object:
    return parse_intermixed(build_parser(argv[0]), argv)


@pytest.mark.parametrize(
    "argv",
    [["replay", "--between", "linear", "r.log", "restart=default"],
     ["replay", "r.log", "--between", "linear", "restart=default"],
     ["replay", "r.log", "restart=default", "--between", "linear"]],
)  # fmt: skip
def test_overrides_anywhere_among_the_options(argv: list[str]) -> None:
    args = _args(argv)
    assert args.items == ["r.log", "restart=default"]  # type: ignore[attr-defined]
    assert args.between == "linear"  # type: ignore[attr-defined]


def test_an_override_after_an_option_changes_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The override after `--between` is used (a policy that does not exist is refused by name)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.log").write_text(LOG, encoding="utf-8")
    assert main(["replay", "r.log", "--between", "linear", "restart=nosuch"]) == 2
    assert "restart: no option 'nosuch'" in capsys.readouterr().err
    assert main(["replay", "--between", "linear", "r.log", "restart=none", "--json"]) == 0
    (replayed,) = json.loads(capsys.readouterr().out)
    assert replayed["file"] == "r.log"


def test_an_unknown_option_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _args(["replay", "r.log", "--between", "linear", "--bogus", "k=v"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --bogus k=v" in capsys.readouterr().err


def test_plan_takes_overrides_after_its_options() -> None:
    args = _args(["plan", "exp.yaml", "--json", "slurm.nodes=2"])
    assert args.overrides == ["slurm.nodes=2"]  # type: ignore[attr-defined]
