"""The JSON Schema of experiment configs (`autoexp config schema`): every key typed.

`RootConfig` keeps `monitoring` and `restart` as mappings at run time (the monitor and the restart
policy validate them with their own models, and a job's stored plan keeps them as written). The
schema types them with those same models: `TypedRootConfig` (config/models.py) puts
`MonitoringSection` (the monitor's settings and the pattern file keys) and `RestartPolicy` in their
place, so an editor checks and completes every key under them.

Descriptions come from the models: a field's `description`, else the comment on its line or the
comment lines right above it (the models document their fields that way), so they are written once.
"""

from __future__ import annotations

import inspect
import io
import re
import textwrap
import tokenize
from functools import cache
from typing import Any

from pydantic import BaseModel

from oellm_autoexp.config.models import TypedRootConfig

_FIELD = re.compile(r"^    (?P<name>[A-Za-z_]\w*)\s*:")  # a field of the class body (after dedent)


def experiment_schema() -> dict[str, Any]:
    """The JSON Schema of an experiment config, with descriptions for every documented field."""
    schema = TypedRootConfig.model_json_schema(by_alias=True)
    models = {cls.__name__: cls for cls in _models(TypedRootConfig)}
    _describe(schema, TypedRootConfig)
    for name, definition in schema.get("$defs", {}).items():
        if name in models:
            _describe(definition, models[name])
    return schema


def _describe(definition: dict[str, Any], cls: type[BaseModel]) -> None:
    comments = field_comments(cls)
    for field, prop in definition.get("properties", {}).items():
        if "description" not in prop and field in comments:
            prop["description"] = comments[field]
    if "description" not in definition and cls.__doc__:
        definition["description"] = inspect.cleandoc(cls.__doc__)


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from `root`'s fields (and their bases), `root` first."""
    seen: list[type[BaseModel]] = []
    todo: list[Any] = [root]
    while todo:
        item = todo.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item in seen:
                continue
            seen.append(item)
            todo += [f.annotation for f in item.model_fields.values()]
            todo += [b for b in item.__mro__[1:] if issubclass(b, BaseModel) and b is not BaseModel]
        else:
            todo += list(getattr(item, "__args__", ()))
    return seen


@cache
def field_comments(cls: type[BaseModel]) -> dict[str, str]:
    """field -> its comment in the class body: the one on its line, else the lines right above it.

    Inherited fields are looked up in the base that declares them.
    """
    found: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            found.update(_own_comments(base))
    return found


def _own_comments(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a model made at run time (create_model) has no source
        return {}
    on_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            on_line[token.start[0]] = token.string.lstrip("#").strip()
    found: dict[str, str] = {}
    above: list[str] = []
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(on_line.get(number, ""))
            continue
        match = _FIELD.match(line)
        if match and not stripped.startswith(("def ", "@")):
            trailing = on_line.get(number)
            text = (
                trailing
                if trailing and not trailing.startswith(("fmt:", "type:", "noqa"))
                else " ".join(above)
            )
            if text:
                found[match["name"]] = text
        above = []
    return found
