"""Compose an experiment from YAML: defaults lists, groups, command-line overrides.

Config search path, first match wins:
  1. every `--config-dir` given on the command line, in order;
  2. every directory in $AUTOEXP_CONFIG_DIR (os.pathsep-separated);
  3. `config/` beside the experiment file, when there is one (`with_experiment_dir()`);
  4. the shipped groups (`shipped_config_dir()`: package data of an installed wheel, or the
     checkout's `config/`).

A defaults entry `backend/megatron: llama1_8b_qkln` reads
`<dir>/backend/megatron/llama1_8b_qkln.yaml` from the first directory that has
it and merges its content under the key path `backend.megatron`. Entries apply
in order, then the experiment file itself, then the command-line overrides
(`a.b=1`; `+a.b=1` adds a key that does not exist yet; `slurm=local` on a
group named in the defaults list swaps that entry).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oellm_autoexp.config.files import CONFIG_DIR_ENV as CONFIG_DIR_ENV
from oellm_autoexp.config.files import SHIPPED_CONFIG_ENV as SHIPPED_CONFIG_ENV
from oellm_autoexp.config.files import SHIPPED_PACKAGE_DIR as SHIPPED_PACKAGE_DIR
from oellm_autoexp.config.files import read_yaml as read_yaml
from oellm_autoexp.config.files import search_path as search_path
from oellm_autoexp.config.files import shipped_config_dir as shipped_config_dir
from oellm_autoexp.config.keys import close_matches, dotted
from oellm_autoexp.config.overrides import (
    COMMAND_LINE,
    KeyPath,
    Override,
    apply_override,
    parse_override,
)
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.errors import UserError

# The project's own groups next to its experiment file (what `autoexp init` writes).
EXPERIMENT_CONFIG_DIR = "config"
DEFAULT_OUTPUT_DIR = "outputs/${experiment.name}"  # when the experiment names none
# Groups whose content lands under another key: `- sweeps: lr_grid` fills `sweep`.
GROUP_TARGETS: dict[str, KeyPath] = {"sweeps": ("sweep",)}


@dataclass
class Composed:
    """The merged (not yet interpolated or validated) config and where each key came from."""

    data: dict[str, Any]
    provenance: Provenance
    source: str  # the experiment file


def with_experiment_dir(dirs: Sequence[Path], experiment: Path) -> list[Path]:
    """`dirs` with `config/` beside the experiment file put before the shipped groups.

    A project keeps its own groups next to its experiments and needs no --config-dir.
    """
    beside = experiment.parent / EXPERIMENT_CONFIG_DIR
    if not beside.is_dir() or any(_same_dir(beside, d) for d in dirs):
        return list(dirs)
    shipped = shipped_config_dir()
    cut = next((i for i, d in enumerate(dirs) if _same_dir(d, shipped)), len(dirs))
    return [*dirs[:cut], beside, *dirs[cut:]]


def labelled_search_path(
    config_dirs: Sequence[str | Path], experiment: Path | None, environ: Mapping[str, str] | None = None
) -> list[tuple[str, Path]]:
    """The search path with the reason each directory is on it, for `autoexp config show`."""
    env = os.environ if environ is None else environ
    from_env = [p for p in env.get(CONFIG_DIR_ENV, "").split(os.pathsep) if p]
    labelled = [("--config-dir", Path(p)) for p in config_dirs]
    labelled += [(f"${CONFIG_DIR_ENV}", Path(p)) for p in from_env]
    shipped = shipped_config_dir()
    if experiment is not None:
        beside = experiment.parent / EXPERIMENT_CONFIG_DIR
        if beside.is_dir() and not any(_same_dir(beside, d) for d in [*(d for _, d in labelled), shipped]):
            labelled.append(("beside the experiment", beside))
    return [*labelled, ("shipped", shipped)]


def _same_dir(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def find_experiment(config: str | Path, dirs: Sequence[Path]) -> Path:
    path = Path(config)
    if path.is_file():
        return path
    for base in dirs:
        for candidate in (base / "experiments" / f"{config}.yaml", base / "experiments" / str(config)):
            if candidate.is_file():
                return candidate
    raise UserError(f"{config}: config file not found (nor as experiments/{config}.yaml in the search path)")


def compose(config: str | Path, overrides: Sequence[str] = (), dirs: Sequence[Path] = ()) -> Composed:
    """Experiment file + its defaults + overrides -> Composed. Raises UserError."""
    dirs = list(dirs) or search_path()
    exp_path = find_experiment(config, dirs)
    dirs = with_experiment_dir(dirs, exp_path)
    return compose_mapping(read_yaml(exp_path), str(exp_path), overrides, dirs)


def compose_mapping(
    own: dict[str, Any], source: str, overrides: Sequence[str] = (), dirs: Sequence[Path] = ()
) -> Composed:
    """Like `compose`, for an experiment given as a mapping (`source` names it in messages)."""
    dirs = list(dirs) or search_path()
    own = dict(own)
    parsed = [parse_override(text) for text in overrides]
    entries, parsed = _swap_group_entries(own.pop("defaults", []), parsed, source, dirs)
    out: dict[str, Any] = {}
    prov = Provenance(default=source)
    _apply_defaults(entries, source, dirs, out, prov, [source])
    merge(out, own, (), prov, source)
    _default_experiment(out, Path(source), prov)
    for override in parsed:
        apply_override(out, override, prov, COMMAND_LINE)
    return Composed(out, prov, source)


def _default_experiment(out: dict[str, Any], exp_path: Path, prov: Provenance) -> None:
    """A composition without an `experiment:` section (only a defaults list) still plans: the
    name defaults to the YAML file's stem, the output dir to outputs/<name>."""
    section = out.get("experiment")
    if section is None:
        section = out["experiment"] = {}
    if not isinstance(section, dict):
        return  # validation names the key and what it expected
    for key, value in (("name", exp_path.stem), ("output_dir", DEFAULT_OUTPUT_DIR)):
        if key not in section:
            section[key] = value
            prov.record(("experiment", key), f"{exp_path} (default)")


def merge(
    dst: dict[str, Any], src: Mapping[str, Any], prefix: KeyPath, prov: Provenance, source: str
) -> None:
    """Deep-merge `src` into `dst`: mappings merge key by key, everything else replaces."""
    for key, value in src.items():
        here = (*prefix, str(key))
        if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
            merge(dst[key], value, here, prov, source)
            continue
        dst[key] = copy.deepcopy(value)
        prov.record(here, source)


def _swap_group_entries(
    entries: Any, overrides: list[Override], source: str, dirs: Sequence[Path]
) -> tuple[list[Any], list[Override]]:
    """`slurm=local` on the command line replaces the defaults entry for group `slurm`,
    or adds one when the experiment names no option of that group (`restart=none`)."""
    entries = _check_entries(entries, source)
    groups = {_entry_group(e, source)[0]: i for i, e in enumerate(entries)}
    rest = []
    for override in overrides:
        group = "/".join(override.path)
        if isinstance(override.value, str) and _group_exists(group, dirs):
            if group in groups:
                entries[groups[group]] = {group: override.value}
            else:
                groups[group] = len(entries)
                entries.append({group: override.value})
        else:
            rest.append(override)
    return entries, rest


def _check_entries(entries: Any, source: str) -> list[Any]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise UserError(f"{source}: defaults must be a list like '- slurm: juwels'")
    return list(entries)


def _entry_group(entry: Any, source: str) -> tuple[str, Any]:
    if isinstance(entry, dict) and len(entry) == 1:
        group, option = next(iter(entry.items()))
        return str(group), option
    raise UserError(f"{source}: defaults entry {entry!r} must be one 'group: option' pair")


def _group_exists(group: str, dirs: Sequence[Path]) -> bool:
    return any((d / group).is_dir() for d in dirs)


def _apply_defaults(
    entries: Any, source: str, dirs: Sequence[Path], out: dict[str, Any], prov: Provenance, stack: list[str]
) -> None:
    for entry in _check_entries(entries, source):
        group, option = _entry_group(entry, source)
        if option is None:
            continue  # `- backend/megatron: null` leaves the group out
        path = _find_group_file(group, str(option), dirs, source)
        if str(path) in stack:
            raise UserError(f"{path}: defaults cycle: {' -> '.join([*stack, str(path)])}")
        content = read_yaml(path)
        nested = content.pop("defaults", [])
        _apply_defaults(nested, str(path), dirs, out, prov, [*stack, str(path)])
        target = GROUP_TARGETS.get(group) or tuple(part for part in group.split("/") if part)
        _merge_at(out, target, content, prov, str(path))


def _merge_at(
    out: dict[str, Any], target: KeyPath, content: dict[str, Any], prov: Provenance, source: str
) -> None:
    node = out
    for key in target:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    merge(node, content, target, prov, source)


def _find_group_file(group: str, option: str, dirs: Sequence[Path], source: str) -> Path:
    for base in dirs:
        candidate = base / group / f"{option}.yaml"
        if candidate.is_file():
            return candidate
    known_groups = sorted({_rel(p, d) for d in dirs if d.is_dir() for p in d.rglob("*") if p.is_dir()})
    where = ", ".join(str(d) for d in dirs)
    if group not in known_groups:
        raise UserError(
            f"{source}: defaults: no config group {group!r}{close_matches(group, known_groups)} "
            f"(searched {where})"
        )
    options = sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})
    raise UserError(
        f"{source}: defaults: {group}: no option {option!r}{close_matches(option, options)}; "
        f"available: {', '.join(options) or 'none'} (searched {where})"
    )


def _rel(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix()


__all__ = [
    "COMMAND_LINE",
    "Composed",
    "Override",
    "apply_override",
    "compose",
    "compose_mapping",
    "dotted",
    "labelled_search_path",
    "merge",
    "parse_override",
    "read_yaml",
    "search_path",
    "shipped_config_dir",
    "with_experiment_dir",
]
