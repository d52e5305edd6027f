"""Message catalogs: what a program prints when it fails, taken from its source, as patterns. No I/O.

A catalog (config/monitoring/catalogs/<name>.yaml, read by adapters/logs/pattern_files.py)
lists the messages of one emitter (Slurm's srun/slurmstepd, NCCL's WARN lines, the CUDA and
HIP error strings, NVIDIA's Xid table, ...) as the program's own printf format strings, each
with what it means:

    - format: 'Task launch for %ps failed on node %s: Job prolog failed'
      groups: [step, node]          # names for the conversions, in order ('-': none)
      error_type: node_failure
      names_node: true               # the `node` group is a node to blame
      example: 'srun: error: Task launch for StepId=23.0 failed on node hpc: Job prolog failed'

A catalog's `defaults:` (EntryDefaults) are what its entries say unless they say otherwise:
`defaults: {error_type: config_error}` gives every entry that names no class that one. The
loaded catalog's `entries` hold them resolved.

Each entry becomes one SignalPattern (`<catalog>.<index>`): the format's literal text is
matched exactly, each conversion by what it can print. The pattern's keyword is one of the
catalog's shared `keywords` the format holds (`NCCL WARN`), else its longest literal run, so
the keyword prefilter (core/classify/keyword_index.py) keeps a catalog's cost to the lines
that hold its words. `example` is a line the entry must classify
as listed (tests/unit/core/classify/test_catalogs.py checks every entry of every catalog).

An Xid catalog is a table of codes: an entry with `xid: 79` is a row. All rows become one
pattern (named as the catalog) that matches any Xid line in any form it is printed (the driver's
`NVRM: Xid (PCI:...): 79, ...`, DCGM's `Detected XID 79 for GPU 0`, the k8s device plugin's
`XidCriticalError: Xid=79`), reads the code and looks it up: a later Xid's `caused by previous
Xid 79` takes 79's row (the earlier Xid is the root); a code without a row is the GPU's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from oellm_autoexp.core.classify.signals import (
    REGEX_CHECKED,
    Decider,
    NodeBlame,
    PatternSet,
    Role,
    SignalPattern,
)

# Among roots the highest priority wins (config/monitoring/base.yaml's scale): what Slurm says
# about how the job ended first, then hardware, memory, configuration, native crashes.
CLASS_PRIORITY = {
    "node_failure": 50,
    "time_limit": 40,
    "preempted": 40,
    "requeue": 40,
    "gpu_hardware": 30,
    "oom": 20,
    "config_error": 15,
    "cuda_error": 10,
    "segfault": 10,
    "numerical_instability": 10,
}

# printf conversions -> what they can print. `%ps` is Slurm's step id (`StepId=12.0`), `%m`
# its errno text; a string (`%s`, `%m`) is lazy so the literal text after it anchors the match.
_CONVERSION = re.compile(r"%(?:%|ps|[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?([diuxXfgecspm]))")
_BY_CONVERSION = {
    "d": r"-?\d+",
    "i": r"-?\d+",
    "u": r"\d+",
    "x": r"(?:0x)?[0-9a-fA-F]+",
    "X": r"(?:0x)?[0-9a-fA-F]+",
    "f": r"-?[\d.]+(?:[eE][-+]?\d+)?",
    "g": r"-?[\d.]+(?:[eE][-+]?\d+)?",
    "e": r"-?[\d.]+(?:[eE][-+]?\d+)?",
    "c": r".",
    "p": r"\S+",
    "ps": r"\S+",
    "s": r".*?",
    "m": r".*?",
}
MIN_KEYWORD = 6  # a shorter literal run filters too little: the format needs a longer one


class CatalogEntry(BaseModel):
    """One message of the emitter and what it means."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str | None = None  # the emitter's printf format string (without its logger's prefix)
    xid: int | None = None  # for an Xid table: the code (the format is the driver's Xid line)
    example: str = Field(min_length=1)  # a line as printed, which must classify as listed
    error_type: str | None = None  # the class; None for an info or teardown line
    role: Role = "root"
    names_node: bool = False  # a `node` group names the node to blame
    # How a match singles out a node for node blame (SignalPattern.blames_node): `nccl_host` for an NCCL line only
    # the node that owns the failing NIC, GPU pair or driver prints (its `host:pid:tid` prefix names it).
    blames_node: NodeBlame | None = None
    groups: list[str] = Field(default_factory=list)  # names of the format's conversions ('-': none)
    priority: int | None = None  # default: CLASS_PRIORITY of the class
    teardown: bool = False  # printed while the job is taken down: never a cause
    fallback: bool = False  # counts only when no specific root or cascade explains the line
    subsystem: str | None = None  # default: the catalog's
    # The line's fields give the class (core/classify/blocks.py DECIDERS); `error_type` is then
    # the class the `example` reads as.
    decide: Decider | None = None
    note: str = ""

    @model_validator(mode="after")
    def _one_shape(self) -> CatalogEntry:
        if (self.format is None) == (self.xid is None):
            raise ValueError("an entry has either `format` or `xid`")
        if self.names_node and "node" not in self.groups and self.xid is None:
            raise ValueError("names_node needs a conversion named `node` in `groups`")
        if self.role in ("root", "cascade") and not self.teardown and self.error_type is None:
            raise ValueError(f"a {self.role} entry needs an error_type")
        if self.format is not None:
            keyword_of(self.format)  # raises when no literal run is long enough to prefilter on
            _check_groups(self.groups)  # format_regex escapes the rest: the group names are all that can fail
        return self


class EntryDefaults(BaseModel):
    """What every entry of a catalog says unless it says otherwise (`defaults:`).

    The settings an emitter's messages share (most of a catalog's entries have one class); not
    the per-message keys (`format`, `xid`, `example`, `groups`, `note`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_type: str | None = None
    role: Role | None = None
    names_node: bool | None = None
    blames_node: NodeBlame | None = None
    priority: int | None = None
    teardown: bool | None = None
    fallback: bool | None = None
    subsystem: str | None = None
    decide: Decider | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any) -> Any:
        """A default is a value entries inherit: `key: null` would hand them nothing (leave the key out)."""
        if isinstance(data, dict):
            empty = sorted(str(k) for k, v in data.items() if v is None)
            if empty:
                raise ValueError(
                    f"{', '.join(empty)}: a default needs a value (leave the key out instead of null)"
                )
        return data


# An info or teardown entry is never a cause: it does not take the catalog's class (root_cause.py would
# count it as evidence for that class).
_NOT_A_CAUSE_KEY = "error_type"


def _with_defaults(entries: object, defaults: object) -> object:
    """The raw `entries`, each with the `defaults` it does not set itself (an entry's own key wins,
    `null` included; an info or teardown entry takes no class). Unchanged when either is not what it
    should be: validation names the fault."""
    if not isinstance(defaults, dict) or not isinstance(entries, list):
        return entries
    try:
        EntryDefaults.model_validate(defaults)
    except ValidationError:
        return entries  # the `defaults` field's own validation reports it, naming the key
    return [_inherit(entry, defaults) if isinstance(entry, dict) else entry for entry in entries]


def _inherit(entry: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    merged = {**defaults, **entry}
    not_a_cause = merged.get("role") == "info" or merged.get("teardown")
    if not_a_cause and _NOT_A_CAUSE_KEY not in entry:
        merged.pop(_NOT_A_CAUSE_KEY, None)
    return merged


class Catalog(BaseModel):
    """The messages of one emitter, from its source (`source`, `version`: where and which)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    subsystem: str = "generic"
    source: str = Field(min_length=1)  # repository and files the formats were taken from
    version: str = Field(min_length=1)  # the release or commit they were read at
    # Literals many entries share (`NCCL WARN`, `srun: error:`): an entry whose literal text holds
    # one uses it as its prefilter keyword, so the catalog adds few words to the keyword scan.
    keywords: list[str] = Field(default_factory=list)
    # What the entries say unless they say otherwise; `entries` hold them resolved. Before
    # `entries`: a bad default is the first error, not an entry's missing class.
    defaults: EntryDefaults = Field(default_factory=EntryDefaults)
    entries: list[CatalogEntry] = Field(min_length=1)
    # For an Xid table: how its one pattern singles out a node to blame (SignalPattern.blames_node).
    blames_node: NodeBlame | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolve_defaults(cls, data: Any) -> Any:
        """Entries inherit the catalog's `defaults` before they are validated (a root needs its class)."""
        if isinstance(data, dict) and "defaults" in data and "entries" in data:
            data = {**data, "entries": _with_defaults(data.get("entries"), data["defaults"])}
        return data


def _check_groups(groups: Sequence[str]) -> None:
    """Group names a regex accepts: identifiers, each once ('-': an unnamed conversion).

    Checked here instead of compiling the entry's regex: its SignalPattern compiles it once, and
    a second compile per entry at load time is what start-up would pay for (re's cache holds 512).
    """
    named = [g for g in groups if g != "-"]
    bad = [g for g in named if not g.isidentifier()]
    if bad:
        raise ValueError(f"group names must be identifiers or '-': {bad}")
    twice = sorted({g for g in named if named.count(g) > 1})
    if twice:
        raise ValueError(f"group names must differ: {twice} named twice")


def format_regex(fmt: str, groups: list[str] | tuple[str, ...] = ()) -> str:
    """The regex of a printf format: its literal text exact, each conversion by what it prints.

    The i-th conversion becomes the named group `groups[i]` when one is given (not '-').
    """
    parts: list[str] = []
    pos = 0
    index = 0
    for match in _CONVERSION.finditer(fmt):
        parts.append(re.escape(fmt[pos : match.start()]))
        pos = match.end()
        token = match.group(0)
        if token == "%%":
            parts.append("%")
            continue
        kind = "ps" if token == "%ps" else match.group(1)
        body = _BY_CONVERSION[kind]
        if pos == len(fmt) and kind in ("s", "m"):
            body = ".*"  # a trailing string: the rest of the line
        name = groups[index] if index < len(groups) else "-"
        parts.append(f"(?P<{name}>{body})" if name != "-" else f"(?:{body})")
        index += 1
    parts.append(re.escape(fmt[pos:]))
    if pos < len(fmt) and _WORD_END.search(fmt):
        # A format that ends in a word (an enum name: `cudaErrorInvalidDevice`) matches that whole word,
        # not the start of a longer one (`cudaErrorInvalidDevicePointer`, another error).
        parts.append(r"(?=[^A-Za-z0-9_]|$)")
    return "".join(parts)


_WORD_END = re.compile(r"[A-Za-z0-9_]$")


def literal_runs(fmt: str) -> list[str]:
    """The format's literal text between conversions (`%%` read as `%`), empty runs left out."""
    runs = _CONVERSION.sub(lambda m: "%" if m.group(0) == "%%" else "\0", fmt).split("\0")
    return [run for run in runs if run]


def keyword_of(fmt: str, shared: Sequence[str] = ()) -> str:
    """A literal every line the format prints holds: the first of `shared` that is in one of its
    literal runs, else its longest literal run (stripped)."""
    runs = literal_runs(fmt)
    for word in shared:
        if any(word in run for run in runs):
            return word
    best = max((run.strip() for run in runs), key=len, default="")
    if len(best) < MIN_KEYWORD:
        raise ValueError(f"{fmt!r}: no literal run of {MIN_KEYWORD}+ characters to prefilter on")
    return best


# Every form an Xid code is printed in, one regex: the driver's kernel-log line (an optional syslog
# `host kernel:` and dmesg time stamp before it; `PCI:` absent in old drivers), DCGM's health
# report, NVIDIA's k8s device plugin, and a later Xid's `caused by previous Xid N`. Which code the
# line names, and what that code means, core/classify/blocks.py decide_xid_code reads.
XID_REGEX = (
    r"(?:(?P<node>[\w.-]+) kernel: )?(?:\[\s*[\d.]+\] )?"
    r"(?:NVRM: Xid \((?P<pci>(?:PCI:)?[0-9a-fA-F:.]+)\): |Detected XID |XidCriticalError: Xid="
    r"|caused by previous Xid )(?P<xid>\d+)\b"
)
XID_KEYWORDS = ["NVRM: Xid", "Detected XID", "XidCriticalError: Xid=", "caused by previous Xid"]


def xid_table(catalog: Catalog) -> dict[int, tuple[str | None, Role]]:
    """The class and role of each `xid:` entry's code (info and teardown entries: no class)."""
    table: dict[int, tuple[str | None, Role]] = {}
    for entry in catalog.entries:
        if entry.xid is not None:
            cause = entry.role in ("root", "cascade") and not entry.teardown
            table[entry.xid] = (entry.error_type if cause else None, entry.role if cause else "info")
    return table


def xid_pattern(catalog: Catalog) -> SignalPattern:
    """One pattern for all of a catalog's `xid:` entries, named as the catalog: it matches any Xid
    line and takes the class of the code it names from the table (`decide: xid_code`)."""
    return SignalPattern(
        name=catalog.name,
        regex=XID_REGEX,
        error_type="gpu_hardware",  # what a code missing from the table reads as (blocks.XID_UNLISTED)
        subsystem=catalog.subsystem,
        priority=0,  # the decided class's (CLASS_PRIORITY)
        keywords=XID_KEYWORDS,
        decide="xid_code",
        codes=xid_table(catalog),
        blames_node=catalog.blames_node,
        description=f"{catalog.name} catalog ({catalog.source}, {catalog.version}): every Xid code by its table row",
    )


def catalog_patterns(catalog: Catalog) -> list[SignalPattern]:
    """One SignalPattern per `format:` entry, named `<catalog>.<n>`, and one for all `xid:` entries
    (named `<catalog>`, in the place of the first of them)."""
    patterns = []
    for i, entry in enumerate(catalog.entries, start=1):
        if entry.xid is None:
            patterns.append(
                _pattern(catalog, entry, f"{catalog.name}.{i}", entry.format or "", tuple(entry.groups))
            )
        elif not any(p.name == catalog.name for p in patterns):
            patterns.append(xid_pattern(catalog))
    return patterns


def _pattern(
    catalog: Catalog, entry: CatalogEntry, name: str, fmt: str, groups: tuple[str, ...]
) -> SignalPattern:
    regex = format_regex(fmt, list(groups))
    priority = entry.priority if entry.priority is not None else CLASS_PRIORITY.get(entry.error_type or "", 0)
    fields: dict[str, Any] = {
        "name": name,
        "regex": regex,
        "error_type": entry.error_type,
        "subsystem": entry.subsystem or catalog.subsystem,
        "role": entry.role,
        "priority": priority,
        "teardown": entry.teardown,
        "fallback": entry.fallback,
        "decide": entry.decide,
        "keywords": [keyword_of(fmt, catalog.keywords)],
        "blames_node": entry.blames_node,
        "description": f"{catalog.name} catalog ({catalog.source}, {catalog.version}): {fmt}",
    }
    # format_regex escapes every literal and CatalogEntry checked the group names: valid by construction
    return SignalPattern.model_validate(fields, context={REGEX_CHECKED: True})


def catalog_pattern_set(catalogs: list[Catalog]) -> PatternSet:
    """The patterns of several catalogs, in order."""
    return PatternSet(patterns=[p for c in catalogs for p in catalog_patterns(c)])
