"""Key paths checked against the typed models, with close matches for typos.

Pydantic would reject an unknown key too, but without the file it came from
and without "did you mean". These walks run on the raw composed dict, before
validation, so every message can name the file, the key path and the
closest valid keys.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from oellm_autoexp.config.models import TypedRootConfig
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.errors import UserError

KeyPath = tuple[str, ...]


def dotted(path: Sequence[str]) -> str:
    return ".".join(path) if path else "<top level>"


def close_matches(word: str, choices: Sequence[str]) -> str:
    """' (close matches: a, b)' or '' — appended to error messages."""
    found = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (close matches: {', '.join(found)})" if found else ""


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """User-facing key (alias if any) -> attribute name."""
    return {(info.alias or name): name for name, info in model.model_fields.items()}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _pick_model(candidates: list[type[BaseModel]], data: Any) -> type[BaseModel] | None:
    """The one model a value validates into; for a tagged union, the one its `kind` names."""
    if len(candidates) == 1:
        return candidates[0]
    kind = data.get("kind") if isinstance(data, Mapping) else None
    for model in candidates:
        field = model.model_fields.get("kind")
        if field is not None and kind in typing.get_args(field.annotation):
            return model
    return None


def child_model(model: type[BaseModel], key: str, data: Any) -> type[BaseModel] | None:
    """The model that validates `data` found under `model.key`; None for free mappings/scalars."""
    name = _field_names(model)[key]
    return _pick_model(_models_in(model.model_fields[name].annotation), data)


def check_unknown_keys(data: Mapping[str, Any], provenance: Provenance) -> None:
    """Raise UserError for the first key no model knows, naming its file and close matches."""
    _walk(TypedRootConfig, data, (), provenance)


def _walk(model: type[BaseModel], data: Mapping[str, Any], path: KeyPath, prov: Provenance) -> None:
    fields = _field_names(model)
    for key, value in data.items():
        here = (*path, str(key))
        if key not in fields:
            raise UserError(
                f"{prov.source(here)}: unknown key {dotted(here)!r}"
                f"{close_matches(str(key), list(fields))}; allowed under "
                f"{dotted(path)}: {', '.join(sorted(fields))}"
            )
        sub = child_model(model, key, value)
        if sub is not None and isinstance(value, Mapping):
            _walk(sub, value, here, prov)


def check_path_exists(data: Mapping[str, Any], path: KeyPath, source: str) -> None:
    """A dotted key given on the command line (or in a sweep) must name something that exists.

    Under a typed model it must be a field; under a free mapping (sbatch
    directives, env, megatron arguments...) it must already be in the config,
    so that a typo never silently adds a new key. `+key=value` adds one.
    """
    model: type[BaseModel] | None = TypedRootConfig
    node: Any = data
    for depth, key in enumerate(path):
        here = path[: depth + 1]
        known = list(_field_names(model)) if model is not None else _keys_of(node)
        if key not in known:
            hint = "" if model is not None else f"; use '+{dotted(path)}=...' to add a new key"
            raise UserError(f"{source}: key {dotted(here)!r} does not exist{close_matches(key, known)}{hint}")
        node = node.get(key) if isinstance(node, Mapping) else None
        model = child_model(model, key, node) if model is not None else None


def _keys_of(node: Any) -> list[str]:
    return [str(k) for k in node] if isinstance(node, Mapping) else []
