"""`Evidence`: what a decision record keeps besides its reason, stored as JSON in the decision row. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from oellm_autoexp.core.jobs.job_state import JobState

# OutcomeKind.CRASH and Trigger.END, spelt out: importing outcome.py and verdict.py here would pull
# the classifier's pydantic models into `autoexp status` and `explain`, which read stored evidence
# only (tests/unit/core/watch/test_evidence_defaults.py keeps them equal).
DEFAULT_KIND = "crash"
DEFAULT_TRIGGER = "end"
_TUPLE_FIELDS = (
    "exclude_nodes",
    "lines",
    "blamed",
    "overrides",
    "named_nodes",
)  # Evidence fields stored as JSON lists


class Evidence(NamedTuple):
    """What a decision record keeps besides its reason. Stored as JSON (`to_json`).

    A NamedTuple, as the store's records are (adapters/store/records.py): `explain` reads it for
    every decision, and a dataclass would import `dataclasses` (with `inspect`) at its start.
    Read it by field name only; a copy with fields changed is `_replace(...)`.
    """

    rule: str | None = None  # the rule that decided; None for fixed answers
    kind: str = DEFAULT_KIND  # the outcome's kind
    state: str = JobState.UNKNOWN.value  # Slurm's state when judged
    error_type: str | None = None  # the root cause's error type
    signal: str | None = None  # the pattern that won as root cause
    node: str | None = None  # the node a hardware/NCCL cause names
    iteration: int | None = None  # the highest iteration the attempt reached
    exclude_nodes: tuple[str, ...] = ()  # --exclude for the next attempt
    delay_s: float = 0.0  # wait before resubmitting
    lines: tuple[str, ...] = ()  # log lines supporting the cause (the root line first)
    trigger: str = DEFAULT_TRIGGER  # what made the monitor judge (see Trigger)
    observed: str | None = None  # what was observed besides the cause ("hang: no progress ...")
    root_line_no: int | None = None  # the root cause's line number in the log
    first_fatal_line_no: int | None = None  # the first fatal line's number
    first_fatal_line: str | None = None  # the first fatal line itself
    after_first_fatal_s: float | None = None  # decision time minus the first fatal line's read time
    blamed: tuple[str, ...] = ()  # "node: evidence" for each node the evidence singles out
    blame_withheld: str | None = None  # why no node was blamed although lines named nodes
    override_set: int | None = None  # the rule's override set the next attempt runs with (1-based)
    overrides: tuple[str, ...] = ()  # that set's `key.path=value` entries
    failed_load_iteration: int | None = (
        None  # the checkpoint the attempt failed to load (quarantined on restart)
    )
    # Nodes whose own NCCL network errors the attempt's lines hold (core/decide/recurring_blame.py):
    # not blame alone, but a node named again by the next attempt's is.
    named_nodes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = self._asdict()
        for key in _TUPLE_FIELDS:
            data[key] = list(getattr(self, key))
        return data

    @classmethod
    def from_json(cls, data: Any) -> Evidence:
        """Read a stored record; keys this version does not know are ignored, missing ones default."""
        if not isinstance(data, Mapping):
            return cls()
        known = {k: v for k, v in data.items() if k in cls._fields}
        for key in _TUPLE_FIELDS:
            if key in known:
                known[key] = tuple(known[key] or ())
        return cls(**known)
