"""Splitting a bracketed command-line list that YAML cannot read (`[a,"20",${x.y}/z]`).

YAML reads `{` inside a flow list as the start of a mapping, so a list holding an
interpolation (`${experiment.output_dir}/ckpt`) is no YAML. Users mean a list of
scalars: split on top-level commas, keep quoted items as the string inside the
quotes, read bare items as YAML scalars (40 -> 40) unless they hold `${...}`.
"""

from __future__ import annotations

from typing import Any

import yaml

_OPEN = {"[": "]", "{": "}"}
_QUOTES = "'\""


def split_flow_list(inner: str) -> list[Any] | None:
    """The items of `inner` (the text between the brackets); None if it does not split cleanly."""
    parts = _split_top_level(inner)
    if parts is None:
        return None
    items = [_item(part.strip()) for part in parts] if inner.strip() else []
    return None if any(item is _BAD for item in items) else items


_BAD = object()


def _split_top_level(text: str) -> list[str] | None:
    parts, stack, quote, start = [], [], "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char in _OPEN:
            stack.append(_OPEN[char])
        elif char in "]}":
            if not stack or stack.pop() != char:
                return None
        elif char == "," and not stack:
            parts.append(text[start:i])
            start = i + 1
    if quote or stack:
        return None
    return [*parts, text[start:]]


def _item(text: str) -> Any:
    if not text:
        return _BAD
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
        return text[1:-1]
    if "${" in text:
        return text  # an interpolation, resolved later
    if text[0] in "[{":
        return _BAD  # nested collections: too ambiguous to guess
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, str | int | float | bool) or value is None else text
