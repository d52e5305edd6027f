"""The fault mix: which families of faults strike, how often, and what each one looks like. No I/O.

A mix (a shipped one: data/mixes/*.yaml, or the user's own YAML) gives a failure rate per
1000 node-days and a count per family; the families' behaviour and log lines come from
data/lines.yaml, and a mix may add families of its own or change a shipped one's behaviour
(`recurs`, `node_fault`, `slurm_drains`, its `variants`). Parsed from mappings: reading the
files is adapters/fs/fleet_files.py's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from oellm_autoexp.core.replay.log_end import parse_end_state
from oellm_autoexp.errors import UserError

HANG_END = "hang"  # `end: hang`: the job stays RUNNING and silent until its wall-clock limit


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LineSpec(_Model):
    """One log line of a fault: when (seconds after the fault), the text, on how many peer ranks."""

    after_s: float = Field(ge=0)
    text: str
    repeat: int = Field(default=1, ge=1)  # printed by this many ranks (the peers' cascade)
    # Printed by every rank of the job but the faulty node's (`repeat` is then ignored): a hung
    # collective's watchdog line, which every rank that reached the collective prints, while the
    # faulty node's ranks, which never reached it, print none (core/decide/straggler_blame.py).
    all_peers: bool = False
    # NCCL's own line (`host:pid:tid [dev] file:line NCCL WARN ...`): printed only when the job
    # runs with NCCL_DEBUG=WARN or more, as our multi-node script sets it (upstream's log has none).
    nccl_debug: bool = False
    # False: not printed when the fault strikes an attempt at start-up (an event of the moment a
    # port went down, which a process started on an already broken port never sees).
    at_startup: bool = True
    # Printed only when the monitor's stack-dump probe asks (monitoring.hang.stack_dump_signal),
    # `after_s` seconds after the probe: a rank's answer (core/decide/stack_dump_blame.py).
    after_probe: bool = False


class Variant(_Model):
    """One way a fault of a family shows in the log, with how often it does (`weight`)."""

    source: str = ""  # where the lines were quoted from
    weight: float = Field(default=1.0, gt=0)
    lines: tuple[LineSpec, ...] = ()
    end: str = HANG_END  # Slurm's end state, STATE[:EXIT], or `hang`
    end_after_s: float = Field(default=0.0, ge=0)

    @field_validator("lines", mode="before")
    @classmethod
    def _lines_from_pairs(cls, value: Any) -> Any:
        # `[0, "text"]` or `[0, "text", {repeat: 8}]`, as lines.yaml writes them.
        out = []
        for item in value or ():
            if isinstance(item, list | tuple):
                extra = item[2] if len(item) > 2 and isinstance(item[2], Mapping) else {}
                if len(item) < 2:
                    raise ValueError(f"a line is [seconds, text], got {item!r}")
                out.append({"after_s": item[0], "text": item[1], **extra})
            else:
                out.append(item)
        return out

    @field_validator("end")
    @classmethod
    def _end_known(cls, value: str) -> str:
        if value != HANG_END:
            parse_end_state(value)  # ValueError names what was expected
        return value

    @property
    def hangs(self) -> bool:
        return self.end == HANG_END


class Family(_Model):
    """A fault family: how it behaves and the ways it shows in the log."""

    recurs: float = Field(default=0.0, ge=0, le=1)  # chance it strikes every later attempt (a bug, a config)
    node_fault: float = Field(default=0.0, ge=0, le=1)  # chance a node is broken by it (exclude it)
    slurm_drains: bool = False  # Slurm takes the node out by itself (NODE_FAIL)
    variants: tuple[Variant, ...] = Field(min_length=1)


class MixFamily(_Model):
    """A family's place in a mix: its count (shares are counts over the total) and overrides."""

    count: float = Field(gt=0)
    note: str = ""
    recurs: float | None = Field(default=None, ge=0, le=1)
    node_fault: float | None = Field(default=None, ge=0, le=1)
    slurm_drains: bool | None = None
    variants: tuple[Variant, ...] | None = None


class MixSpec(_Model):
    """A mix as written: a rate, families with counts, and the setting it was published for."""

    name: str = Field(min_length=1)
    source: str = ""
    failures_per_1000_node_days: float = Field(gt=0)
    families: dict[str, MixFamily] = Field(min_length=1)
    settings: dict[str, Any] = Field(default_factory=dict)  # defaults for the simulation (settings.py)


class Mix(_Model):
    """A mix ready to sample: shares that sum to 1 and every family's behaviour and lines."""

    name: str
    source: str
    failures_per_1000_node_days: float
    shares: dict[str, float]
    families: dict[str, Family]
    settings: dict[str, Any]

    @model_validator(mode="after")
    def _families_known(self) -> Mix:
        missing = sorted(set(self.shares) - set(self.families))
        if missing:
            raise ValueError(f"no lines for families {', '.join(missing)}")
        return self


def load_families(data: Mapping[str, Any], source: str) -> dict[str, Family]:
    """The shipped families (data/lines.yaml's `families:`); UserError names the key path."""
    families = data.get("families") if isinstance(data, Mapping) else None
    if not isinstance(families, Mapping):
        raise UserError(f"{source}: expected a mapping `families:` of fault families")
    return {name: _validated(Family, spec, f"{source}: families.{name}") for name, spec in families.items()}


def load_mix(data: Any, shipped: Mapping[str, Family], source: str) -> Mix:
    """A mix from its parsed YAML, joined with the shipped families; UserError on bad input."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a mapping (name, failures_per_1000_node_days, families)")
    spec = _validated(MixSpec, data, source)
    total = sum(f.count for f in spec.families.values())
    families: dict[str, Family] = {}
    for name, entry in spec.families.items():
        families[name] = _family_of(name, entry, shipped, source)
    return Mix(
        name=spec.name,
        source=spec.source,
        failures_per_1000_node_days=spec.failures_per_1000_node_days,
        shares={name: entry.count / total for name, entry in spec.families.items()},
        families=families,
        settings=dict(spec.settings),
    )


def _family_of(name: str, entry: MixFamily, shipped: Mapping[str, Family], source: str) -> Family:
    base = shipped.get(name)
    if base is None and entry.variants is None:
        known = ", ".join(sorted(shipped))
        raise UserError(
            f"{source}: families.{name}: unknown family; give its `variants` (lines, end) "
            f"or use a shipped one ({known})"
        )
    changes = {k: v for k, v in entry.model_dump(exclude={"count", "note"}).items() if v is not None}
    if base is None:
        return _validated(Family, changes, f"{source}: families.{name}")
    return base.model_copy(update={k: getattr(entry, k) for k in changes})


def _validated(model: type[_Model], data: Any, source: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(
            f"{source}: {where}: {first['msg']}" if where else f"{source}: {first['msg']}"
        ) from None
