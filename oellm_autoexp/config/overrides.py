"""Command-line overrides `key.path=value` (and `+key=value`): parsed and applied to a config mapping.

Pure: text and mappings in, mappings out; no files, no environment. Used by composing
(config/loader.py) and by an attempt's plan (plan/attempt_plan.py: the override set a
restart rule chose), which must not reach the loader's file reading.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

from oellm_autoexp.config.flow_list import split_flow_list
from oellm_autoexp.config.keys import check_path_exists
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.errors import UserError

KeyPath = tuple[str, ...]
COMMAND_LINE = "command line"  # the provenance of a value given as an override


@dataclass(frozen=True)
class Override:
    path: KeyPath
    value: Any
    add: bool  # `+key=value`: the key may be new
    text: str


def parse_override(text: str) -> Override:
    key, sep, raw = text.partition("=")
    add = key.startswith("+")
    key = key.lstrip("+").strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"{COMMAND_LINE}: override {text!r} must look like key.path=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = _unparsed_value(raw, key, text)
    return Override(tuple(key.split(".")), value, add, text)


def _unparsed_value(raw: str, key: str, text: str) -> Any:
    """A value YAML could not read: a plain string, unless it looks like a list or a mapping.

    `[--steps,"20",--dir,${experiment.output_dir}/ckpt]` is no YAML (`{` opens a mapping in a
    flow list) but is meant as a list: its items are split on top-level commas. Anything
    bracketed that still does not split cleanly is an error naming the key, never one string.
    """
    stripped = raw.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        items = split_flow_list(stripped[1:-1])
        if items is not None:
            return items
    if stripped[:1] in "[{":
        kind = "list [a,b,...]" if stripped.startswith("[") else "mapping {k: v}"
        raise UserError(
            f"{COMMAND_LINE}: override {text!r}: the value of {key} looks like a {kind} but does not parse;"
            " quote items that contain commas, brackets or braces, e.g. [a,'b,c']"
        )
    return raw  # not YAML: take it as the literal string


def apply_override(data: dict[str, Any], override: Override, prov: Provenance, source: str) -> None:
    if not override.add:
        check_path_exists(data, override.path, f"{source}: override {override.text!r}")
    node = data
    for key in override.path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[override.path[-1]] = copy.deepcopy(override.value)
    prov.record(override.path, source)
