"""A catalog's `defaults:` are what its entries say unless they say otherwise (core/classify/catalog.py).

The shipped catalogs state a class most of their entries share once; what they load as is what
the entries written out in full gave before `defaults:` existed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import (
    CATALOG_DIR,
    catalog_path,
    load_catalog,
    monitoring_dirs,
)
from oellm_autoexp.core.classify.catalog import Catalog, CatalogEntry, EntryDefaults
from oellm_autoexp.errors import UserError

DIRS = monitoring_dirs()
NAMES = sorted(p.stem for d in DIRS if (d / CATALOG_DIR).is_dir() for p in (d / CATALOG_DIR).glob("*.yaml"))


def raw_catalog(name: str) -> dict[str, Any]:
    path = catalog_path(name, DIRS)
    assert path is not None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_catalog_loads_as_its_entries_written_out_in_full(name: str) -> None:
    """Each entry is the one its own keys over the catalog's defaults make, in the file's order."""
    raw = raw_catalog(name)
    defaults = raw.get("defaults") or {}

    def written_out(entry: dict[str, Any]) -> dict[str, Any]:
        merged = {**defaults, **entry}
        if (merged.get("role") == "info" or merged.get("teardown")) and "error_type" not in entry:
            merged.pop("error_type", None)  # a line that is never a cause takes no class
        return merged

    expected = [CatalogEntry.model_validate(written_out(entry)) for entry in raw["entries"]]
    assert list(load_catalog(name, DIRS).entries) == expected


def test_the_catalogs_that_state_a_class_once_resolve_to_it() -> None:
    """What the six catalogs with a default class load as, counted: every cause line of environment,
    allocators and trainer_config is config_error or oom as its catalog says; checkpoint_files' two info
    lines (loader notices) have no class."""
    classes = {n: [e.error_type for e in load_catalog(n, DIRS).entries] for n in ("environment", "allocators",
               "trainer_config", "checkpoint_files")}  # fmt: skip
    assert set(classes["environment"]) == {"config_error"} and len(classes["environment"]) >= 22
    assert set(classes["allocators"]) == {"oom"}
    assert set(classes["trainer_config"]) == {"config_error"}
    assert classes["checkpoint_files"].count(None) == 2


@pytest.mark.parametrize("name", NAMES)
def test_no_info_or_teardown_entry_inherits_a_class(name: str) -> None:
    """A default class reaches roots and cascades only: an info or teardown line names none."""
    for entry in load_catalog(name, DIRS).entries:
        assert (entry.error_type is None) == (entry.role == "info" or entry.teardown), entry.format


def test_some_shipped_catalogs_state_their_class_once() -> None:
    """Where nearly every message has one class, the catalog says it once."""
    with_defaults = {n for n in NAMES if raw_catalog(n).get("defaults")}
    assert {"allocators", "checkpoint_files", "environment", "native_crash"} <= with_defaults


def catalog(defaults: dict[str, Any], *entries: dict[str, Any]) -> Catalog:
    return Catalog.model_validate(
        {"name": "t", "source": "s", "version": "v", "defaults": defaults, "entries": list(entries)}
    )


ROOT = {"format": "Something failed badly: %s", "example": "Something failed badly: x"}


def test_an_entry_inherits_what_it_does_not_set() -> None:
    """The class, priority and fallback of the defaults reach an entry that names none of them."""
    (entry,) = catalog({"error_type": "oom", "priority": 7, "fallback": True}, ROOT).entries
    assert (entry.error_type, entry.priority, entry.fallback) == ("oom", 7, True)


def test_an_entry_overrides_a_default_null_included() -> None:
    """An entry's own key wins over the default, an explicit `null` too (an info line with no class)."""
    own = {**ROOT, "error_type": "segfault"}
    info = {**ROOT, "role": "info", "error_type": None}
    first, second = catalog({"error_type": "oom"}, own, info).entries
    assert (first.error_type, second.error_type) == ("segfault", None)


def test_no_defaults_changes_nothing() -> None:
    """An empty `defaults:` (or none) leaves each entry as written."""
    assert catalog({}, {**ROOT, "error_type": "oom"}).entries[0].priority is None
    plain = {"name": "t", "source": "s", "version": "v", "entries": [{**ROOT, "error_type": "oom"}]}
    assert Catalog.model_validate(plain).defaults == EntryDefaults()


def test_an_inherited_setting_is_checked_like_an_own_one() -> None:
    """A root whose class comes from nowhere is refused as before; an inherited role needs no class."""
    with pytest.raises(ValueError, match="needs an error_type"):
        catalog({"priority": 3}, ROOT)
    assert catalog({"role": "info"}, ROOT).entries[0].error_type is None


def write_catalog(tmp_path: Path, body: str) -> None:
    folder = tmp_path / CATALOG_DIR
    folder.mkdir()
    header = "name: bad\nsource: s\nversion: v\n"
    entry = "entries:\n  - format: 'Something failed: %s'\n    example: x\n"
    (folder / "bad.yaml").write_text(header + body + entry, encoding="utf-8")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # a per-message key is no default
        ("defaults:\n  error_type: oom\n  format: 'x %s'\n", r"bad\.yaml: defaults key 'format': not a setting entries inherit"),
        ("defaults:\n  eror_type: oom\n", r"bad\.yaml: defaults key 'eror_type': not a setting entries inherit"),
        ("defaults:\n  error_type: oom\n  priority: high\n", r"bad\.yaml: defaults key 'priority': .*integer"),
        ("defaults:\n  role: fatal\n  error_type: oom\n", r"bad\.yaml: defaults key 'role': "),
        # misspelt: named as such, not as the entries' missing class
        ("default:\n  error_type: oom\n", r"bad\.yaml: key 'default': not a catalog key"),
    ],
)  # fmt: skip
def test_a_bad_default_is_one_clear_error_naming_file_and_key(
    tmp_path: Path, body: str, message: str
) -> None:
    """Unknown or ill-typed keys in `defaults:` are refused, named by file and key (not as an entry's fault)."""
    write_catalog(tmp_path, body)
    with pytest.raises(UserError, match=message):
        load_catalog("bad", [tmp_path])


def test_an_unknown_entry_key_is_still_refused(tmp_path: Path) -> None:
    """Defaults do not loosen an entry: its unknown key names the entry and the key."""
    folder = tmp_path / CATALOG_DIR
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        "name: bad\nsource: s\nversion: v\ndefaults:\n  error_type: oom\n"
        "entries:\n  - format: 'Something failed: %s'\n    example: x\n    clas: oom\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError, match=r"bad\.yaml: entries\[0\] key 'clas': Extra inputs"):
        load_catalog("bad", [tmp_path])


def test_an_info_or_teardown_entry_takes_no_default_class() -> None:
    """A catalog's default class reaches its causes only: a notice or a teardown line keeps none (it would
    count as evidence for that class), unless it names one itself."""
    info = {**ROOT, "role": "info"}
    teardown = {**ROOT, "role": "cascade", "teardown": True}
    cause, notice, down = catalog({"error_type": "oom"}, ROOT, info, teardown).entries
    assert (cause.error_type, notice.error_type, down.error_type) == ("oom", None, None)


def test_a_null_default_is_refused_naming_the_key(tmp_path: Path) -> None:
    """`role: null` in defaults hands the entries nothing: one message names the file, `defaults` and the key."""
    folder = tmp_path / CATALOG_DIR
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        "name: bad\nsource: s\nversion: v\ndefaults: {error_type: oom, role: null}\n"
        "entries:\n  - format: 'Something failed badly: %s'\n    example: 'Something failed badly: x'\n"
    )
    with pytest.raises(UserError) as raised:
        load_catalog("bad", [tmp_path])
    assert str(raised.value).endswith(
        "bad.yaml: defaults: role: a default needs a value (leave the key out instead of null)"
    )
