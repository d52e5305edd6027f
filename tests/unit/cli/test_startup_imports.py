"""`autoexp` answers at once: importing the CLI and the read-only commands pulls no ORM, no
pydantic models and no torch (checked in a fresh interpreter, as a user's shell runs it), and
the dispatch table names every command its module registers."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from oellm_autoexp.cli.main import (
    COMMANDS,
    USAGE,
    build_parser,
    command_in,
    main,
    top_help_asked,
    top_level_help,
)

HEAVY = ("sqlalchemy", "pydantic", "torch", "numpy", "yaml", "jinja2", "watchdog", "apscheduler")
ROOT = Path(__file__).resolve().parents[3]


def _loaded_after(code: str, cwd: Path) -> dict[str, object]:
    """Run `code` in a fresh interpreter; which HEAVY modules it loaded, and `python -X importtime` lines."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    return {"heavy": json.loads(done.stdout.strip().splitlines()[-1]), "imported": imported}


def test_importing_the_cli_imports_no_orm_models_or_torch(tmp_path: Path) -> None:
    """`import oellm_autoexp.cli.main` (what the `autoexp` script does first) loads none of them."""
    found = _loaded_after("import oellm_autoexp.cli.main", tmp_path)
    assert found["heavy"] == []
    top = {name.split(".")[0] for name in found["imported"]}  # type: ignore[union-attr]
    assert not top & {"sqlalchemy", "pydantic", "torch"}, sorted(top)


def _one_session(state: Path) -> None:
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.core.jobs.job_state import JobState

    now = datetime.now(UTC)
    with SQLiteStore(state) as store:
        session = store.create_session("s", config_path="e.yaml", config={}, now=now)
        job = store.add_job(session.id, job_key="k", name="train", plan={}, now=now)
        attempt = store.record_intent(job.id, 1, "tag", now=now)
        store.confirm_submitted(attempt, "17", now=now, log_path="/logs/17.out")
        store.update_attempt_state(attempt, JobState.FAILED, exit_code=1, ended_at=now)
        store.record_decision(job.id, attempt_id=attempt, action="restart", reason="crash", now=now,
                              evidence={"error_type": "nccl_error"})  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["--version"], 0), (["--help"], 0), (["status", "--help"], 0), (["status"], 0),
     (["status", "--json"], 0), (["sessions"], 0), (["explain", "train"], 0), (["explain", "nope"], 2)],
)  # fmt: skip
def test_version_help_and_read_only_commands_import_nothing_heavy(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    """The commands typed in loops run on a real session without the ORM, pydantic, YAML or torch."""
    _one_session(tmp_path / "state")
    run = (
        "from oellm_autoexp.cli.main import main\n"
        f"try:\n    code = main(['--state-dir', 'state', *{argv!r}])\nexcept SystemExit as e:\n    code = e.code\n"
        f"assert code == {code}, code"
    )
    assert _loaded_after(run, tmp_path)["heavy"] == []


def test_the_dispatch_table_names_what_each_module_registers() -> None:
    """COMMANDS lists every command with the module that registers it and the same help line."""
    registered: dict[str, tuple[str, str]] = {}
    modules = sorted({module for module, _ in COMMANDS.values()})
    package = Path(importlib.import_module("oellm_autoexp.cli").__file__ or "").parent
    on_disk = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_") and p.stem != "main"}
    assert on_disk == set(modules), "a command module missing from cli/main.py COMMANDS (or a stale entry)"
    for module in modules:
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"oellm_autoexp.cli.{module}").register(subparsers)
        helps = {a.dest: a.help for a in subparsers._choices_actions}
        for name in subparsers.choices:
            registered[name] = (module, helps[name] or "")
    assert registered == COMMANDS


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["status"], "status"), (["--state-dir", "s", "explain", "j"], "explain"),
     (["--state-dir=s", "sessions"], "sessions"), (["--version"], None), (["-h"], None),
     (["run", "x.yaml", "--sbatch-arg", "--exclude=n1"], "run")],
)  # fmt: skip
def test_the_command_word_is_found_after_global_options(argv: list[str], command: str | None) -> None:
    assert command_in(argv) == command


@pytest.mark.parametrize("argv", [["--help"], ["-h", "status"], ["--state-dir", "s", "--help", "run"]])
def test_the_top_level_help_lists_every_command_whatever_follows(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A command's own parser is built alone (the others' are not needed to run it), but a help
    asked before the command word lists them all (written without argparse: top_level_help)."""
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert all(f"\n  {name} " in shown for name in COMMANDS), shown


def test_the_top_level_help_names_what_the_parser_takes() -> None:
    """`autoexp --help` is written without argparse: it names every option the top-level parser takes,
    and misspelt or missing commands are refused by a parser that prints the same help."""
    parser = build_parser(None)
    helped = top_level_help()
    options = [o for action in parser._actions for o in action.option_strings]
    assert options and all(o in helped for o in options), options
    assert parser.format_help() == helped
    assert parser.format_usage() == f"usage: {USAGE}\n" and helped.startswith(f"usage: {USAGE}\n")


@pytest.mark.parametrize(
    ("argv", "asked"),
    [(["-h"], True), (["--state-dir", "x", "--help", "run"], True), (["--state-dir", "-h", "status"], False),
     (["status", "-h"], False), (["status"], False)],
)  # fmt: skip
def test_the_top_level_help_is_told_from_a_commands_help(argv: list[str], asked: bool) -> None:
    assert top_help_asked(argv) is asked


@pytest.mark.parametrize("argv", [["--version"], ["status"], ["status", "--json"], ["sessions"]])
def test_the_commands_typed_in_loops_define_no_dataclass(tmp_path: Path, argv: list[str]) -> None:
    """`status` and `sessions` read a thousand records: they are NamedTuples (adapters/store/records.py),
    and on Python 3.11 the dataclasses module (with inspect, ast, dis, tokenize) and each frozen
    dataclass cost more than everything else these commands import; socket is not needed either."""
    _one_session(tmp_path / "state")
    run = f"from oellm_autoexp.cli.main import main\nassert main(['--state-dir', 'state', *{argv!r}]) == 0"
    floor = set(_loaded_after("pass", tmp_path)["imported"])  # type: ignore[arg-type]  # what site imports
    found = (set(_loaded_after(run, tmp_path)["imported"]) - floor) & {"dataclasses", "inspect", "socket"}  # type: ignore[arg-type]
    assert not found, sorted(found)
