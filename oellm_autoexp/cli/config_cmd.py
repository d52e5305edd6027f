"""`autoexp config show CONFIG [overrides]` and `autoexp config schema`.

`show` prints the validated config as YAML, then, as YAML comments, where each key came
from: the group file (and which directory of the search path held it), the experiment
file or the command line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from oellm_autoexp.cli._common import add_config_args
from oellm_autoexp.config.experiment import load_composed, load_root
from oellm_autoexp.config.keys import dotted
from oellm_autoexp.config.loader import COMMAND_LINE, Composed, KeyPath, labelled_search_path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("config", help="show the composed config, or its JSON Schema")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")
    sub.required = True
    show = sub.add_parser("show", help="print the composed, interpolated, validated config as YAML")
    add_config_args(show)
    show.set_defaults(func=show_config)
    schema = sub.add_parser("schema", help="print the JSON Schema of experiment configs")
    schema.set_defaults(func=print_schema)


def show_config(args: argparse.Namespace) -> int:
    root = load_root(args.config, args.overrides, args.config_dir)
    data = root.model_dump(mode="json", by_alias=True, exclude_none=True)
    print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")
    composed = load_composed(args.config, args.overrides, args.config_dir)
    print("\n".join(provenance_lines(composed, args.config_dir)))
    return 0


def provenance_lines(composed: Composed, config_dirs: list[str]) -> list[str]:
    """YAML comments: each source (with the search-path entry that held it) and the keys it set,
    sources in the order they were applied (defaults, the experiment file, the command line)."""
    search = labelled_search_path(config_dirs, Path(composed.source))
    keys_by_source: dict[str, list[KeyPath]] = {}
    for path, source in composed.provenance.owners(composed.data):
        keys_by_source.setdefault(source, []).append(path)
    applied = list(dict.fromkeys(composed.provenance.sources.values()))
    lines = [
        "",
        "# Where each key came from (the last to set it wins). Groups are searched in this order:",
        *(f"#   {label}: {directory}" for label, directory in search),
    ]

    def applied_order(source: str) -> tuple[int, int]:
        last = {composed.source: 1, COMMAND_LINE: 2}.get(source, 0)
        return last, applied.index(source) if source in applied else len(applied)

    for source in sorted(keys_by_source, key=applied_order):
        lines.append(f"# {describe_source(source, composed.source, search)}")
        lines.append(f"#     {summarize_keys(keys_by_source[source])}")
    return lines


def summarize_keys(paths: list[KeyPath], shown: int = 4) -> str:
    """Dotted keys, siblings folded: `backend.megatron.{lr, min_lr, … 30 more}`."""
    by_parent: dict[KeyPath, list[str]] = {}
    for path in paths:
        by_parent.setdefault(path[:-1], []).append(path[-1])
    parts = []
    for parent, names in by_parent.items():
        if len(names) == 1 or not parent:
            parts += [dotted((*parent, name)) for name in names]
            continue
        more = f", … {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{dotted(parent)}.{{{', '.join(names[:shown])}{more}}}")
    return ", ".join(parts)


def describe_source(source: str, experiment: str, search: list[tuple[str, Path]]) -> str:
    if source == experiment:
        return f"experiment file {source}"
    path = Path(source)
    for label, directory in search:
        if path.is_relative_to(directory):
            group_file = path.relative_to(directory)
            return f"{group_file.parent.as_posix()}: {group_file.stem} ({label}: {source})"
    return source  # the command line, or a file named by path


def print_schema(args: argparse.Namespace) -> int:
    del args
    from oellm_autoexp.config.schema import experiment_schema

    print(json.dumps(experiment_schema(), indent=2))
    return 0
