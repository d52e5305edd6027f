"""The `autoexp` entry point.

Each command lives in its own module in this package and exposes
`register(subparsers)`, which adds a sub-parser whose `func` default takes the
parsed `argparse.Namespace` and returns an exit code. Commands are discovered
here so that adding one never means editing this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from oellm_autoexp import __version__
from oellm_autoexp.adapters.executors.factory import state_dir
from oellm_autoexp.adapters.store.buffer import is_disk_full
from oellm_autoexp.errors import UserError

_NOT_COMMANDS = {"main"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoexp",
        description="Submit training runs to Slurm and keep them alive.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--state-dir",
        default=None,
        help="where sessions live (default: $AUTOEXP_STATE_DIR or ./.oellm_state)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    package = importlib.import_module("oellm_autoexp.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name in _NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"oellm_autoexp.cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        # Bad input: one clear message, exit 2, no traceback.
        print(f"autoexp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        where = state_dir(getattr(args, "state_dir", None))
        print(f"autoexp: error: no space left in {where} ({exc.__class__.__name__}: disk full); "
              "the command stopped: free space on its filesystem and run it again",
              file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
