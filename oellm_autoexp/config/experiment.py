"""From an experiment file to validated per-job configs: the one entry point for callers.

compose (files + overrides) -> unknown-key check -> sweep points -> per point:
apply its values, interpolate, validate. Every failure is a UserError that
names the file and the key path.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from oellm_autoexp.config.interpolation import resolve
from oellm_autoexp.config.keys import check_unknown_keys, dotted
from oellm_autoexp.config.loader import Composed, Override, apply_override, compose, search_path
from oellm_autoexp.config.models import RootConfig
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.config.sweep import SweepPoint, expand_sweep
from oellm_autoexp.errors import UserError


@dataclass(frozen=True)
class JobConfig:
    """One sweep point's fully resolved, validated config."""

    point: SweepPoint
    config: RootConfig
    source: str  # the experiment file


def load_composed(
    config: str | Path, overrides: Sequence[str] = (), config_dirs: Sequence[str | Path] = ()
) -> Composed:
    composed = compose(config, overrides, search_path(config_dirs))
    check_unknown_keys(composed.data, composed.provenance)
    return composed


def load_jobs(
    config: str | Path,
    overrides: Sequence[str] = (),
    config_dirs: Sequence[str | Path] = (),
    environ: Mapping[str, str] | None = None,
) -> list[JobConfig]:
    """Every job the experiment describes (one per sweep point). Raises UserError."""
    composed = load_composed(config, overrides, config_dirs)
    env = os.environ if environ is None else environ
    points = expand_sweep(composed.data.get("sweep"), composed.source)
    return [_job_for(composed, point, env) for point in points]


def load_root(
    config: str | Path,
    overrides: Sequence[str] = (),
    config_dirs: Sequence[str | Path] = (),
    environ: Mapping[str, str] | None = None,
) -> RootConfig:
    """The composed experiment as a whole (sweep not expanded), for `autoexp config show`."""
    composed = load_composed(config, overrides, config_dirs)
    env = os.environ if environ is None else environ
    return validate(resolve(composed.data, composed.provenance, env), composed.provenance)


def _job_for(composed: Composed, point: SweepPoint, environ: Mapping[str, str]) -> JobConfig:
    data = copy.deepcopy(composed.data)
    data.pop("sweep", None)
    prov = copy.deepcopy(composed.provenance)
    where = f"{composed.source}: sweep point {point.key!r}"
    for key, value in point.values:
        text = f"{key}={value!r}"
        override = Override(tuple(key.lstrip("+").split(".")), value, key.startswith("+"), text)
        apply_override(data, override, prov, where)
    resolved = resolve(data, prov, environ)
    return JobConfig(point, validate(resolved, prov), composed.source)


def validate(data: Mapping[str, Any], provenance: Provenance) -> RootConfig:
    """Validate into RootConfig; the first error becomes a UserError naming its file and key."""
    try:
        return RootConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, provenance)) from None


def format_validation_error(exc: ValidationError, provenance: Provenance) -> str:
    lines = []
    for error in exc.errors():
        path = _user_path(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required key is missing"
        value = "" if error["type"] == "missing" else f" (got {_shortened(repr(error.get('input')))})"
        lines.append(f"{provenance.source(path)}: {dotted(path)}: {message}{value}")
    more = f" (and {len(lines) - 1} more: " + "; ".join(lines[1:]) + ")" if len(lines) > 1 else ""
    return lines[0] + more


def _shortened(text: str, keep: int = 60) -> str:
    """A value quoted in a message: a 100,000-character input is shown as its start and length."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text):,} characters)"


_BACKEND_TAGS = {"command", "torchrun", "megatron_torchrun"}


def _user_path(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """Pydantic puts the chosen union member's tag into the location (`backend.command.x`)."""
    parts = [str(p) for p in loc]
    if len(parts) > 2 and parts[0] == "backend" and parts[1] in _BACKEND_TAGS:
        del parts[1]
    return tuple(parts)
