"""Which file (or the command line) last set each key, for error messages."""

from __future__ import annotations

from dataclasses import dataclass, field

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
