"""`autoexp init [DIR]`: a starter experiment and a config/ skeleton for the user's own groups."""

from __future__ import annotations

import argparse
from pathlib import Path

from oellm_autoexp.cli._starter import FILES
from oellm_autoexp.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "init", help="write a starter experiment (local, no Slurm) and a config/ skeleton"
    )
    parser.add_argument("dir", nargs="?", default=".", help="where to write them (default: here)")
    parser.set_defaults(func=init_project)


def init_project(args: argparse.Namespace) -> int:
    written = write_starter(Path(args.dir))
    for path in written:
        print(f"wrote {path}")
    # Relative output dirs are taken from the cwd: run from the directory written to.
    cd = "" if Path(args.dir) == Path() else f"cd {args.dir} && "
    print(
        f"next: {cd}autoexp run experiment.yaml   (autoexp config show experiment.yaml: where each key came from)"
    )
    return 0


def write_starter(directory: Path) -> list[Path]:
    """Write every starter file under `directory`; nothing at all if one of them exists."""
    targets = [directory / name for name in FILES]
    for path in targets:
        if path.exists():
            raise UserError(f"{path}: already exists; autoexp init never overwrites (choose another DIR)")
    for path, text in zip(targets, FILES.values(), strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return targets
