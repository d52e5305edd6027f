"""`${a.b.c}` references and `${oc.env:VAR,default}` environment lookups.

A string that is exactly one reference keeps the referenced value's type
(`${slurm.nodes}` stays an int); a reference inside a longer string is
formatted into it. `\\${` is a literal `${`. References resolve against the
whole config after sweep values and command-line overrides are applied, so
`${experiment.name}` in a sweep point sees that point's name. Nothing here is
ever handed to a shell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from oellm_autoexp.config.keys import close_matches, dotted
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.errors import UserError

KeyPath = tuple[str, ...]
# Innermost first: `${oc.env:A,${experiment.output_dir}/x}` resolves the inner one first.
_REF = re.compile(r"\$\{([^${}]+)\}")
_ESCAPED = "\\${"
_SENTINEL = "\x00AUTOEXP_DOLLAR_BRACE\x00"
_ENV_PREFIXES = ("oc.env:", "env:")


def resolve(data: Mapping[str, Any], provenance: Provenance, environ: Mapping[str, str]) -> dict[str, Any]:
    """Return a copy of `data` with every reference replaced. Raises UserError."""
    resolver = _Resolver(data, provenance, environ)
    return resolver.value(dict(data), ())


class _Resolver:
    def __init__(self, root: Mapping[str, Any], prov: Provenance, environ: Mapping[str, str]) -> None:
        self.root = root
        self.prov = prov
        self.environ = environ
        self.active: list[KeyPath] = []  # references being resolved, to catch cycles

    def value(self, value: Any, path: KeyPath) -> Any:
        if isinstance(value, Mapping):
            return {k: self.value(v, (*path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, (*path, str(i))) for i, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            return self.string(value, path)
        return value

    def string(self, text: str, path: KeyPath) -> Any:
        text = text.replace(_ESCAPED, _SENTINEL)
        while (match := _REF.search(text)) is not None:
            found = self.lookup(match.group(1).strip(), path)
            if match.span() == (0, len(text)):
                return found.replace(_SENTINEL, "${") if isinstance(found, str) else found
            # An env value containing `${` is data, not another reference.
            piece = _format(found).replace("${", _SENTINEL)
            text = text[: match.start()] + piece + text[match.end() :]
        return text.replace(_SENTINEL, "${")

    def lookup(self, ref: str, path: KeyPath) -> Any:
        for prefix in _ENV_PREFIXES:
            if ref.startswith(prefix):
                return self.env(ref[len(prefix) :], path)
        target = tuple(ref.split("."))
        if target in self.active:
            chain = " -> ".join(dotted(p) for p in [*self.active, target])
            raise UserError(f"{self.prov.source(path)}: {dotted(path)}: interpolation cycle {chain}")
        raw = self.raw(target, ref, path)
        self.active.append(target)
        try:
            return self.value(raw, target)
        finally:
            self.active.pop()

    def raw(self, target: KeyPath, ref: str, path: KeyPath) -> Any:
        node: Any = self.root
        for depth, key in enumerate(target):
            if not isinstance(node, Mapping) or key not in node:
                siblings = [str(k) for k in node] if isinstance(node, Mapping) else []
                raise UserError(
                    f"{self.prov.source(path)}: {dotted(path)}: ${{{ref}}} refers to "
                    f"{dotted(target[: depth + 1])!r}, which does not exist{close_matches(key, siblings)}"
                )
            node = node[key]
        return node

    def env(self, spec: str, path: KeyPath) -> str:
        name, sep, default = spec.partition(",")
        name = name.strip()
        if name in self.environ:
            return self.environ[name]
        if sep:
            return default.strip()
        raise UserError(
            f"{self.prov.source(path)}: {dotted(path)}: environment variable {name} is not set "
            f"(set it, or give a default: ${{oc.env:{name},<default>}})"
        )


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping | list):
        raise UserError(f"cannot format a mapping or list into a string: {value!r}")
    return str(value)
