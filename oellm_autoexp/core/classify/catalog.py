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

Each entry becomes one SignalPattern (`<catalog>.<index>`): the format's literal text is
matched exactly, each conversion by what it can print. The pattern's keyword is one of the
catalog's shared `keywords` the format holds (`NCCL WARN`), else its longest literal run, so
the keyword prefilter (core/classify/keyword_index.py) keeps a catalog's cost to the lines
that hold its words. `example` is a line the entry must classify
as listed (tests/unit/core/classify/test_catalogs.py checks every entry of every catalog).

An Xid catalog is a table of codes: an entry with `xid: 79` matches the driver's
`NVRM: Xid (PCI:...): 79, ...` line and, when a later Xid says it was `caused by previous
Xid 79`, that line too (the earlier Xid is the root; the later one is its consequence).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from oellm_autoexp.core.classify.signals import Decider, PatternSet, Role, SignalPattern

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
            re.compile(format_regex(self.format, self.groups))
        return self


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
    entries: list[CatalogEntry] = Field(min_length=1)


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
    return "".join(parts)


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


XID_LINE = "NVRM: Xid (PCI:%s): {code}, "  # the driver's Xid line up to the code (nvidia.ko)
XID_CAUSE = "caused by previous Xid {code}"  # a later Xid (45 and others) naming its cause


def _xid_formats(entry: CatalogEntry) -> list[tuple[str, tuple[str, ...], bool]]:
    """(format, group names, whether a word must end there) of an Xid entry's lines."""
    code = entry.xid
    forms: list[tuple[str, tuple[str, ...], bool]] = [(XID_LINE.format(code=code), ("pci",), False)]
    if entry.error_type is not None and not entry.teardown:
        forms.append((XID_CAUSE.format(code=code), (), True))  # not `... Xid 790`
    return forms


def catalog_patterns(catalog: Catalog) -> list[SignalPattern]:
    """One SignalPattern per entry (and per form of an Xid entry), named `<catalog>.<n>`."""
    patterns = []
    for i, entry in enumerate(catalog.entries, start=1):
        if entry.xid is not None:
            forms = _xid_formats(entry)
        else:
            forms = [(entry.format or "", tuple(entry.groups), False)]
        for j, (fmt, groups, word_end) in enumerate(forms):
            name = f"{catalog.name}.{i}" + ("" if j == 0 else "b")
            patterns.append(_pattern(catalog, entry, name, fmt, groups, word_end))
    return patterns


def _pattern(
    catalog: Catalog, entry: CatalogEntry, name: str, fmt: str, groups: tuple[str, ...], word_end: bool
) -> SignalPattern:
    regex = format_regex(fmt, list(groups)) + (r"\b" if word_end else "")
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
        "description": f"{catalog.name} catalog ({catalog.source}, {catalog.version}): {fmt}",
    }
    return SignalPattern(**fields)


def catalog_pattern_set(catalogs: list[Catalog]) -> PatternSet:
    """The patterns of several catalogs, in order."""
    return PatternSet(patterns=[p for c in catalogs for p in catalog_patterns(c)])
