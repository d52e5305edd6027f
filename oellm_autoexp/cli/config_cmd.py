"""`autoexp config show CONFIG [overrides]` and `autoexp config schema`."""

from __future__ import annotations

import argparse
import json

import yaml

from oellm_autoexp.cli._common import add_config_args
from oellm_autoexp.config.experiment import load_root
from oellm_autoexp.config.models import RootConfig


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
    return 0


def print_schema(args: argparse.Namespace) -> int:
    del args
    print(json.dumps(RootConfig.model_json_schema(by_alias=True), indent=2))
    return 0
