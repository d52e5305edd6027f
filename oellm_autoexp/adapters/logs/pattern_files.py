"""Read signal pattern files (config/monitoring/*.yaml) into a PatternSet.

A pattern file is a YAML mapping:

    include: [base]          # other pattern files: a name or a path; their patterns come first
    disable: [python_exception]   # drop included patterns by name
    patterns:                # a pattern with an included one's name replaces it
      - name: my_loader_crash
        regex: 'DataLoader worker \\(pid (?P<pid>\\d+)\\) is killed'
        error_type: killed
        subsystem: dataloader

A name is looked up as `monitoring/<name>.yaml` in the config search path
(--config-dir, $AUTOEXP_CONFIG_DIR, the shipped config/); an include is first
looked for next to the file that includes it. `catalogs: [slurm, nccl]` adds the
patterns of message catalogs, `monitoring/catalogs/<name>.yaml` in the same search
path (core/classify/catalog.py). Every problem is a UserError naming the file,
the pattern (or catalog entry) and the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from oellm_autoexp.config.files import read_yaml, search_path
from oellm_autoexp.core.classify.catalog import Catalog, EntryDefaults, catalog_pattern_set
from oellm_autoexp.core.classify.signals import PatternSet, merge_pattern_sets
from oellm_autoexp.core.classify.vocabulary import WordModel
from oellm_autoexp.errors import UserError

MONITORING_DIR = "monitoring"
CATALOG_DIR = "catalogs"  # under each monitoring dir
DEFAULT_PATTERNS = "megatron_production"


def monitoring_dirs(config_dirs: Sequence[str | Path] = ()) -> list[Path]:
    """Where pattern files are looked up by name, first match wins."""
    return [base / MONITORING_DIR for base in search_path(config_dirs)]


def available_pattern_files(search_dirs: Sequence[Path]) -> list[str]:
    names = {p.stem for d in search_dirs if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def resolve_pattern_file(
    name_or_path: str | Path, search_dirs: Sequence[Path], relative_to: Path | None = None
) -> Path:
    """The file a name (`base`) or a path (`my/patterns.yaml`) refers to."""
    text = str(name_or_path)
    as_path = Path(text)
    candidates: list[Path] = []
    if relative_to is not None and not as_path.is_absolute():
        candidates += [relative_to / text, relative_to / f"{text}.yaml"]
    candidates.append(as_path)
    if as_path.suffix not in (".yaml", ".yml") and len(as_path.parts) == 1:
        candidates += [d / f"{text}.yaml" for d in search_dirs]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = ", ".join(available_pattern_files(search_dirs)) or "none"
    raise UserError(f"{text}: pattern file not found (known pattern sets: {known})")


def load_patterns(
    names_or_paths: Sequence[str | Path] = (DEFAULT_PATTERNS,),
    search_dirs: Sequence[Path] | None = None,
) -> PatternSet:
    """Load and merge pattern files (with their includes), in order."""
    dirs = list(search_dirs) if search_dirs is not None else monitoring_dirs()
    sets = [_load_file(resolve_pattern_file(n, dirs), dirs, ()) for n in names_or_paths]
    return merge_pattern_sets(sets)


def pattern_set_from_mapping(
    data: Mapping[str, Any], origin: str, search_dirs: Sequence[Path] | None = None
) -> PatternSet:
    """A PatternSet from an already-read mapping (e.g. a composed `monitoring:` section)."""
    dirs = list(search_dirs) if search_dirs is not None else monitoring_dirs()
    return _from_mapping(dict(data), origin, None, dirs, ())


def _load_file(path: Path, dirs: Sequence[Path], stack: tuple[Path, ...]) -> PatternSet:
    resolved = path.resolve()
    if resolved in stack:
        chain = " -> ".join(str(p) for p in (*stack, resolved))
        raise UserError(f"{path}: include cycle: {chain}")
    return _from_mapping(read_yaml(path), str(path), path.parent, dirs, (*stack, resolved))


def _from_mapping(
    data: dict[str, Any], origin: str, here: Path | None, dirs: Sequence[Path], stack: tuple[Path, ...]
) -> PatternSet:
    own = _validate(data, origin)
    included = []
    for name in own.include:
        try:
            path = resolve_pattern_file(name, dirs, relative_to=here)
        except UserError as exc:
            raise UserError(f"{origin}: include: {exc}") from None
        included.append(_load_file(path, dirs, stack))
    catalogs = [load_catalog(name, dirs, origin) for name in own.catalogs]
    if isinstance(own.vocabulary, str):
        own = own.with_words(load_vocabulary(own.vocabulary, dirs, origin))
    # The catalogs follow the file's own patterns; its `disable` list applies to them too.
    tail = PatternSet(disable=own.disable)
    return merge_pattern_sets([*included, own, catalog_pattern_set(catalogs), tail])


_VOCABULARIES: dict[Path, WordModel] = {}  # by file: every job of a sweep shares the shipped one


def load_vocabulary(name: str, search_dirs: Sequence[Path], origin: str = "vocabulary") -> WordModel:
    """The word model `monitoring/<name>.json` (core/classify/vocabulary.py); UserError naming the file."""
    path = next((d / f"{name}.json" for d in search_dirs if (d / f"{name}.json").is_file()), None)
    if path is None:
        raise UserError(f"{origin}: vocabulary: {name}: word model not found (looked for {name}.json)")
    if path not in _VOCABULARIES:
        try:
            _VOCABULARIES[path] = WordModel.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise UserError(f"{path}: not a word model ({exc})") from None
    return _VOCABULARIES[path]


def catalog_path(name: str, search_dirs: Sequence[Path]) -> Path | None:
    """The first `catalogs/<name>.yaml` in the monitoring dirs, or None."""
    for d in search_dirs:
        candidate = d / CATALOG_DIR / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_catalog(name: str, search_dirs: Sequence[Path], origin: str = "catalogs") -> Catalog:
    """A message catalog by name; UserError naming the file, the entry and the key."""
    path = catalog_path(name, search_dirs)
    if path is None:
        raise UserError(
            f"{origin}: catalogs: {name}: catalog not found (looked for {CATALOG_DIR}/{name}.yaml)"
        )
    data = read_yaml(path)
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path}: {_describe_catalog_error(exc)}") from None
    except ValueError as exc:  # a format without a literal run to prefilter on
        raise UserError(f"{path}: {exc}") from None


def _describe_catalog_error(exc: ValidationError) -> str:
    """`entries[3] key 'groups': ...` or `defaults key 'format': ...` for the first error; an unknown
    top-level key first (a misspelt `defaults:` would otherwise read as its entries' fault)."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if unknown:
        return f"key {unknown[0]['loc'][0]!r}: not a catalog key"
    error = errors[0]
    loc = list(error["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    message = str(error["msg"]).removeprefix("Value error, ")
    if len(loc) >= 2 and loc[0] == "entries" and isinstance(loc[1], int):
        key = ".".join(str(p) for p in loc[2:]) or "(the entry itself)"
        where = f"entries[{loc[1]}] key {key!r}"
    elif len(loc) >= 2 and loc[0] == "defaults":
        where = f"defaults key {'.'.join(str(p) for p in loc[1:])!r}"
        if error["type"] == "extra_forbidden":
            message = f"not a setting entries inherit (those are: {', '.join(EntryDefaults.model_fields)})"
    return f"{where}: {message}"


def _validate(data: dict[str, Any], origin: str) -> PatternSet:
    try:
        return PatternSet.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{origin}: {_describe(exc, data)}") from None


def _describe(exc: ValidationError, data: dict[str, Any]) -> str:
    """`patterns[3] (name 'x') key 'regex': invalid regular expression: ...` for the first error."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    if len(loc) >= 2 and loc[0] == "patterns" and isinstance(loc[1], int):
        entries = data.get("patterns") or []
        entry = entries[loc[1]] if loc[1] < len(entries) else {}
        name = entry.get("name", "?") if isinstance(entry, dict) else "?"
        key = ".".join(str(p) for p in loc[2:]) or "(the pattern itself)"
        where = f"patterns[{loc[1]}] (name {name!r}) key {key!r}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}"
