"""Sweeps: a grid (cartesian product) and/or a list of points -> one job per point.

Each point gets a stable key built from its values only (`lr-0.0001_mbs-16`),
so re-planning the same sweep gives the same keys, job names and output
directories; the monitor uses the key to match a job across restarts.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oellm_autoexp.errors import UserError

_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


@dataclass(frozen=True)
class SweepPoint:
    key: str  # stable, filesystem- and job-name-safe; "" when there is no sweep
    values: tuple[tuple[str, Any], ...]  # (dotted key, value), in sweep order


NO_SWEEP = SweepPoint("", ())


def expand_sweep(sweep: Mapping[str, Any] | None, source: str) -> list[SweepPoint]:
    """All points of a sweep section (raw, as composed); [NO_SWEEP] when there is none.

    Raises UserError for a sweep with zero points, naming the key that empties it.
    """
    if sweep is None:
        return [NO_SWEEP]
    grid = _grid_points(sweep.get("grid") or {}, source)
    listed = _list_points(sweep.get("list") or [], source)
    if not grid and not listed:
        raise UserError(f"{source}: sweep: has zero points (give sweep.grid or sweep.list)")
    combos = [{**g, **p} for g in (grid or [{}]) for p in (listed or [{}])]
    return _name_points(combos)


def _grid_points(grid: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(grid, Mapping):
        raise UserError(f"{source}: sweep.grid must map dotted keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list):
            raise UserError(f"{source}: sweep.grid.{key}: expected a list of values, got {values!r}")
        if not values:
            raise UserError(f"{source}: sweep.grid.{key}: empty list, so the sweep has zero points")
    keys = list(grid)
    return (
        [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())] if keys else []
    )


def _list_points(points: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(points, list) or not all(isinstance(p, Mapping) for p in points):
        raise UserError(f"{source}: sweep.list must be a list of mappings (dotted key -> value)")
    return [dict(p) for p in points]


def _name_points(combos: list[dict[str, Any]]) -> list[SweepPoint]:
    """Short names (last key segment) unless two points would collide; then full keys; then an index."""
    names = {k for c in combos for k in c}
    short_ok = len({k.lstrip("+").split(".")[-1] for k in names}) == len(names)
    for short in (True, False) if short_ok else (False,):
        keys = [_point_key(c, short) for c in combos]
        if len(set(keys)) == len(keys):
            break
    else:
        keys = [f"{k}_p{i}" for i, k in enumerate(keys)]
    return [SweepPoint(k, tuple(c.items())) for k, c in zip(keys, combos, strict=True)]


def _point_key(combo: Mapping[str, Any], short: bool) -> str:
    parts = []
    for dotted, value in combo.items():
        name = dotted.lstrip("+").split(".")[-1] if short else dotted.lstrip("+").replace(".", "-")
        parts.append(f"{_safe(name)}-{_safe(_text(value))}")
    return "_".join(parts) or "point"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "x"
