"""The `autoexp` entry point.

Each command lives in its own module in this package and exposes
`register(subparsers)`, which adds a sub-parser whose `func` default takes the
parsed `argparse.Namespace` and returns an exit code.

Only the module of the command being run is imported: `autoexp --version`, `--help` and the
read-only commands must answer at once (they are typed in loops and called by scripts), and
importing every command pulls the ORM, the config models and the Slurm adapters. COMMANDS
names each command's module and one-line help; tests/unit/cli/test_startup_imports.py checks
it against what the modules register, so a new command is one module plus one line here.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from oellm_autoexp import __version__
from oellm_autoexp.errors import UserError

if TYPE_CHECKING:  # argparse is imported when a parser is built: `--version` answers without it
    import argparse

# command -> (module under oellm_autoexp.cli, the help line `autoexp --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "cancel": ("cancel", "cancel jobs for good: the monitor will not restart them"),
    "checkpoint": ("checkpoint", "check a run's newest checkpoint; roll back an incomplete one"),
    "classify": ("classify", "print the root cause of job logs and every signal found"),
    "config": ("config_cmd", "show the composed config, or its JSON Schema"),
    "init": ("init", "write a starter experiment (local, no Slurm) and a config/ skeleton"),
    "monitor-session": ("monitor_session", "resume monitoring a session (or all active ones)"),
    "plan": ("plan", "render every job's sbatch script; submit nothing"),
    "replay": ("replay", "replay recorded logs through the monitor's classifier, hang tracker and policy"),
    "report": ("report", "one self-contained HTML page: attempts, decisions, iterations, lost time"),
    "run": ("run", "submit every job, then monitor and restart them until they end"),
    "scrontab": (
        "scrontab",
        "print (or --install) a scrontab entry that keeps each session's monitor job queued",
    ),
    "simulate": (
        "simulate",
        "simulate a fleet's published faults through the monitor: ETTR against upstream, none, oracle",
    ),
    "status": ("status", "jobs of a session: attempt, state, last signal, budget"),
    "sessions": ("sessions", "list sessions"),
    "explain": ("explain", "every decision about a job, with its evidence"),
    "submit": ("submit", "submit every job of an experiment"),
}
_GLOBAL_WITH_VALUE = ("--state-dir",)  # global options that take a value (the command comes after)
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for `git log | head`


def _global_words(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """The option words before the command (a global option's value skipped), and the command word."""
    words: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _GLOBAL_WITH_VALUE:
            skip = True
        elif not word.startswith("-"):
            return words, word
        else:
            words.append(word)
    return words, None


def command_in(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (the first word that is no global option or its value)."""
    return _global_words(argv)[1]


def asks_version(argv: Sequence[str]) -> bool:
    """`--version` before any command word, and before `-h`/`--help` (argparse acts on the first)."""
    for word in _global_words(argv)[0]:
        if word in ("-h", "--help"):
            return False
        if word == "--version":
            return True
    return False


DESCRIPTION = "Submit training runs to Slurm and keep them alive."
USAGE = "autoexp [-h] [--version] [--state-dir STATE_DIR] COMMAND ..."
STATE_DIR_HELP = "where sessions live (default: $AUTOEXP_STATE_DIR or ./.oellm_state)"
COMMAND_HELP = "one of the commands below; `autoexp COMMAND -h` shows its options"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command`: its module registers its sub-parser, no other command's is built.
    Without a known command (no command, a misspelt one), COMMAND is one positional whose choices
    are the commands; its help is `top_level_help()`."""
    import argparse

    class TopLevelParser(argparse.ArgumentParser):
        def format_help(self) -> str:
            return top_level_help()

    known = command in COMMANDS
    kind, usage = (argparse.ArgumentParser, None) if known else (TopLevelParser, USAGE)
    parser = kind(prog="autoexp", usage=usage, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--state-dir", default=None, help=STATE_DIR_HELP)
    if not known:
        parser.add_argument("command", metavar="COMMAND", choices=list(COMMANDS), help=COMMAND_HELP)
        return parser
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    module = importlib.import_module(f"oellm_autoexp.cli.{COMMANDS[str(command)][0]}")
    module.register(subparsers)
    return parser


def top_level_help() -> str:
    """`autoexp --help`, written without argparse (it is typed to learn the commands, and must
    answer as fast as `--version`): usage, options and every command with its help line."""
    options = [("-h, --help", "show this help message and exit"),
               ("--version", "show program's version number and exit"),
               ("--state-dir STATE_DIR", STATE_DIR_HELP)]  # fmt: skip
    width = max(len(name) for name, _ in options) + 2
    lines = [f"usage: {USAGE}", "", DESCRIPTION, "",
             "options:", *(f"  {name:<{width}}{text}" for name, text in options), "",
             f"commands ({COMMAND_HELP.split('; ')[1]}):"]  # fmt: skip
    width = max(map(len, COMMANDS)) + 2
    lines += [f"  {name:<{width}}{help_line}" for name, (_, help_line) in COMMANDS.items()]
    return "\n".join(lines) + "\n"


def top_help_asked(argv: Sequence[str]) -> bool:
    """`-h`/`--help` before any command word: the top-level help, which lists every command."""
    return any(word in ("-h", "--help") for word in _global_words(argv)[0])


def parse_intermixed(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """parse_args, where words after an option still join the command's list positional.

    argparse stops filling a `nargs="*"` positional at the first option, so `autoexp replay LOG
    --between linear restart=default` left `restart=default` unrecognized. A command names its
    list positional with `set_defaults(trailing=DEST)`; plain words left over are appended to it.
    """
    args, extras = parser.parse_known_args(argv)
    trailing = getattr(args, "trailing", None)
    if extras and trailing is not None and not any(word.startswith("-") for word in extras):
        getattr(args, trailing).extend(extras)
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return _dispatch(args_list)
        finally:
            sys.stdout.flush()  # here, so that a closed pipe is seen below, not at interpreter exit
    except BrokenPipeError:
        # `autoexp status | head -1`: the reader has what it wanted; stop quietly, as git does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT


def _dispatch(argv: list[str]) -> int:
    if asks_version(argv):  # what argparse's version action prints, without building a parser
        print(f"autoexp {__version__}")
        return 0
    if top_help_asked(argv):
        print(top_level_help(), end="")
        return 0
    parser = build_parser(command_in(argv))
    args = parse_intermixed(parser, argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        # Bad input: one clear message, exit 2, no traceback.
        print(f"autoexp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise
    except Exception as exc:
        from oellm_autoexp.adapters.store.buffer import is_disk_full

        if not is_disk_full(exc):
            raise
        from oellm_autoexp.adapters.fs.state_dir import state_dir

        where = state_dir(getattr(args, "state_dir", None))
        print(f"autoexp: error: no space left in {where} ({exc.__class__.__name__}: disk full); "
              "the command stopped: free space on its filesystem and run it again",
              file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
