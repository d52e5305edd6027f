"""Which file (or the command line) last set each key, for error messages and `autoexp config show`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KeyPath = tuple[str, ...]


@dataclass
class Provenance:
    """Key path -> source. The longest recorded prefix of a path is its source."""

    sources: dict[KeyPath, str] = field(default_factory=dict)
    default: str = "<config>"

    def record(self, path: KeyPath, source: str) -> None:
        # A value replaced wholesale forgets where its old sub-keys came from.
        for old in [p for p in self.sources if p[: len(path)] == path and len(p) > len(path)]:
            del self.sources[old]
        self.sources[path] = source

    def source(self, path: KeyPath) -> str:
        for end in range(len(path), -1, -1):
            found = self.sources.get(tuple(path[:end]))
            if found is not None:
                return found
        return self.default

    def owners(self, data: Mapping[str, Any], prefix: KeyPath = ()) -> list[tuple[KeyPath, str]]:
        """(key path, source) for `data`, as coarse as it stays exact: a whole section when
        one source set every key in it, otherwise its keys one by one, in document order."""
        sources = {self.source(path) for path in _leaf_paths(data, prefix)}
        if len(sources) == 1 and prefix:
            return [(prefix, sources.pop())]
        found: list[tuple[KeyPath, str]] = []
        for key, value in data.items():
            here = (*prefix, str(key))
            if isinstance(value, Mapping) and value:
                found += self.owners(value, here)
            else:
                found.append((here, self.source(here)))
        return found


def _leaf_paths(data: Mapping[str, Any], prefix: KeyPath) -> list[KeyPath]:
    paths: list[KeyPath] = []
    for key, value in data.items():
        here = (*prefix, str(key))
        paths += _leaf_paths(value, here) if isinstance(value, Mapping) and value else [here]
    return paths or [prefix]
