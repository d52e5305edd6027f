"""Read the shard table of a torch.distributed.checkpoint `.metadata` without running it.

`.metadata` is a pickle of `torch.distributed.checkpoint.metadata.Metadata`; its
`storage_data` maps each saved item to a `_StorageInfo(relative_path, offset, length)`.
A pickle from a checkpoint directory may come from anyone, so it is never unpickled with
the classes it names: every global resolves to an inert stand-in (`_Stub`) that only
records its arguments and state, and nothing is imported or called. The table is then
read from the stand-ins' recorded state.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from oellm_autoexp.core.checkpoint.verdict import DcpMetadata

# Plain containers a metadata pickle may name; anything else becomes a stand-in.
_CONTAINERS: Mapping[tuple[str, str], type] = {
    ("collections", "OrderedDict"): dict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}


class _Stub:
    """An inert object standing in for an instance of a pickled class."""

    global_name = "?"
    args: tuple[Any, ...]
    state: Any
    items: dict[Any, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:
        obj = super().__new__(cls)
        obj.args = args
        obj.state = None
        obj.items = {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # REDUCE calls the class; __new__ already kept the arguments

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.items[len(self.items)] = value

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)

    def field(self, name: str) -> Any:
        """A dataclass field from the recorded state (a dict, or (dict, slots) for slotted classes)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}
        return state.get(name) if isinstance(state, dict) else None


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        known = _CONTAINERS.get((module, name))
        if known is not None:
            return known
        return type(name, (_Stub,), {"global_name": f"{module}.{name}"})

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not used by .metadata")


def load_inert(stream: BinaryIO) -> Any:
    """Unpickle with stand-ins for every class: structure only, no code of the pickle runs."""
    return _InertUnpickler(stream).load()


def read_dcp_metadata(path: Path, name: str) -> DcpMetadata:
    """The shard table of one `.metadata` file; `error` says why it could not be read."""
    try:
        with path.open("rb") as stream:
            root = load_inert(stream)
    except OSError as exc:
        return DcpMetadata(name, error=f"cannot read: {exc.strerror or exc}")
    except Exception as exc:  # any malformed pickle: say so, never crash the check
        return DcpMetadata(name, error=f"not a readable pickle ({type(exc).__name__}: {exc})")
    return shard_table(root, name)


def shard_table(root: Any, name: str) -> DcpMetadata:
    """Shard file -> bytes it must hold (max offset + length) from an inert Metadata."""
    storage = root.field("storage_data") if isinstance(root, _Stub) else None
    if not isinstance(storage, dict):
        return DcpMetadata(name, error="no storage_data table (not a torch.distributed.checkpoint Metadata)")
    needed: dict[str, int] = {}
    for info in storage.values():
        entry = _storage_entry(info)
        if entry is None:
            return DcpMetadata(name, error=f"unexpected storage entry {type(info).__name__}")
        path, end = entry
        needed[path] = max(needed.get(path, 0), end)
    return DcpMetadata(name, shards=needed, items=len(storage))


def _storage_entry(info: Any) -> tuple[str, int] | None:
    if not isinstance(info, _Stub):
        return None
    path, offset, length = (info.field(k) for k in ("relative_path", "offset", "length"))
    if not isinstance(path, str) or not isinstance(offset, int) or not isinstance(length, int):
        return None
    return path, offset + length
