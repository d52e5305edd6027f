"""Signal patterns (what to look for in a job log) and Signal (one hit). No I/O.

A `SignalPattern` is one regex with a meaning: the `error_type` it reveals, the
`subsystem` it comes from and its `role`:

- root:     a cause in its own right (an OOM, a segfault, a time limit);
- cascade:  usually a consequence of another rank's failure (a peer's NCCL
            timeout, "connection closed by peer"); it is the cause only when no
            root was seen at all;
- progress: the job moves (an iteration line, a checkpoint saved);
- info:     worth keeping but never a cause (which rank torchrun saw fail first).

`teardown: true` marks launcher and runtime noise printed while a job is being
taken down ("Sending process N closing signal SIGTERM"); it is never a cause.

`blames_node` says that a match singles out one node of the allocation, and how
(core/decide/node_blame.py reads it from the Signal; docs/classification.md):

- host:         the node its match names (a `node`, `host`, `hostname` or
                `node_again` group); a match that names none blames no one;
- rank:         the node of the rank that printed it (its `[rankN]:` prefix
                through the rendered script's rank layout line), never a group;
- host_or_rank: the node its match names, else the one node of a one-node
                allocation (a host-less device fault can only be about it), else
                the node of the rank that printed it.
- nccl_host:    the node NCCL's `host:pid:tid [dev]` prefix of the line names
                (Signal.nccl_host, read by core/classify/prefixes.py); a line
                without that prefix blames no one.

Patterns are validated here and compiled once, on first use: most patterns of a
set never see a line their keywords admit, so start-up does not compile them.
Loading them from YAML files lives in `oellm_autoexp.adapters.logs.pattern_files`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from oellm_autoexp.core.classify.vocabulary import WordModel

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _sc
    import sre_parse as _sp

Role = Literal["root", "cascade", "progress", "info"]
# How a match singles out the node to blame (module docstring); None: it names no node.
NodeBlame = Literal["host", "rank", "host_or_rank", "nccl_host"]
NODE_GROUPS = ("node", "host", "hostname", "node_again")  # named regex groups that carry a node name
# The error types of a job the scheduler ends by itself (its time limit, a preemption, a requeue, a cancel,
# a node it lost). The policy waits for that end rather than race it (core/decide/policy.py), and a guess
# never names one: a raised exception's job never gets such an end (core/classify/guess.py).
ENDED_BY_SCHEDULER = frozenset({"time_limit", "preempted", "requeue", "cancelled", "node_failure"})
# Validation context key: the regex is valid by construction, so it is not compiled to check it.
REGEX_CHECKED = "regex_checked"
# A line that starts the launcher's teardown of the whole job (see SignalPattern.teardown_start).
TeardownStart = Literal["worker_failed", "stop_requested", "step_signalled"]
# core/classify/blocks.py DECIDERS
Decider = Literal[
    "srun_task",
    "stepd_cancel",
    "elastic_signal",
    "elastic_exit",
    "exception_message",
    "worker_signal",
    "loss_scale_value",
    "negative_code",
    "amd_sq_error",
    "launcher_exit",
    "slurm_refusal",
    "slurm_state",
    "worker_exception",
    "cpp_exception",
    "cpp_what",
    "error_file_message",
    "signal_words",
    "shell_status",
    "xid_code",  # the Xid number the line names, looked up in the pattern's `codes` table
]

MIN_KEYWORD_LEN = 3  # shorter literals filter too little to be worth a prefilter entry


class SignalPattern(BaseModel):
    """One regex and what a match means. Compiled once, on construction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    regex: str = Field(min_length=1)
    error_type: str | None = None  # oom, nccl, nccl_timeout, hang, ... (None for progress/info)
    subsystem: str = "generic"  # cuda, nccl, gloo, slurm, host, python, torchrun, megatron, ...
    role: Role = "root"
    priority: int = 0  # among roots the highest wins, then the earliest line
    groups: list[str] | None = None  # named groups to extract; None: every named group
    teardown: bool = False  # launcher/runtime noise while dying: never a cause
    ignore_case: bool = False
    fallback: bool = False  # applies only to lines no other root/cascade pattern matched
    keywords: list[str] | None = None  # literal prefilter; None: derived from the regex
    after: str | None = None  # only within `within_lines` after a hit of this pattern (streams)
    within_lines: int = Field(default=10, ge=1)
    # The launcher is tearing the whole job down: `worker_failed` (a worker died, e.g.
    # torchrun's `Sending process N closing signal`) or `stop_requested` (the launcher itself
    # was told to stop: scancel, the time limit) or `step_signalled` (Slurm ended the step by a
    # signal and gave no reason: a bare `*** STEP 12.0 ON n1 CANCELLED AT <time> ***`). The
    # monitor takes `worker_failed` as the end of the attempt even while Slurm still says RUNNING.
    teardown_start: TeardownStart | None = None
    # A parser of core/classify/blocks.py (DECIDERS) whose reading of the line's fields gives the
    # class instead of `error_type`; when it gives none, the hit is info (never a cause).
    decide: Decider | None = None
    # For `decide: xid_code`: the class and role of each Xid code (catalogs/xid.yaml, read by
    # its resolution column); a code not listed is the GPU's (core/classify/blocks.py XID_UNLISTED).
    codes: dict[int, tuple[str | None, Role]] | None = None
    blames_node: NodeBlame | None = None  # a match singles out this node (module docstring)
    # A match warns that the job is about to hang (a node's link went down): the counter may then
    # stand still only briefly before the attempt is judged hung (core/watch/progress.py).
    warns_of_hang: bool = False
    description: str = ""

    _compiled: re.Pattern[str] | None = PrivateAttr(default=None)
    _keywords: tuple[str, ...] = PrivateAttr()

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, value: str, info: ValidationInfo) -> str:
        # A regex built from escaped literals (core/classify/catalog.py format_regex) is valid by
        # construction; its builder says so (context `regex_checked`) and saves a compile at load.
        if isinstance(info.context, dict) and info.context.get(REGEX_CHECKED):
            return value
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from exc
        return value

    @field_validator("groups")
    @classmethod
    def _groups_exist(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        regex = info.data.get("regex")
        if value is None or regex is None:
            return value
        named = set(re.compile(regex).groupindex)
        missing = [g for g in value if g not in named]
        if missing:
            raise ValueError(f"{missing} are not named groups of the regex (it has {sorted(named)})")
        return value

    @field_validator("blames_node")
    @classmethod
    def _node_group_exists(cls, value: NodeBlame | None, info: ValidationInfo) -> NodeBlame | None:
        regex = info.data.get("regex")
        if value != "host" or regex is None:
            return value
        extracted = info.data.get("groups")
        named = set(re.compile(regex).groupindex if extracted is None else extracted)
        if not named & set(NODE_GROUPS):
            raise ValueError(
                f"blames_node: host needs a named group that holds the node (one of {list(NODE_GROUPS)}) "
                "among the groups it extracts"
            )
        return value

    def model_post_init(self, __context: Any) -> None:
        if self.keywords is not None:
            words = [w for w in self.keywords if w]
        else:
            words = required_literals(self.regex, self.ignore_case)
        # Surrounding blanks add nothing to a filter and make the whole-text scan slow
        # (every space would start a candidate match).
        words = [w.strip() or w for w in words]
        self._keywords = tuple(dict.fromkeys(w.lower() if self.ignore_case else w for w in words))

    @property
    def flags(self) -> int:
        return re.IGNORECASE if self.ignore_case else 0

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.regex, self.flags)
        return self._compiled

    @property
    def prefilter_keywords(self) -> tuple[str, ...]:
        """A line can match only if it contains one of these (empty: no prefilter)."""
        return self._keywords

    def extract(self, match: re.Match[str]) -> dict[str, str]:
        found = match.groupdict()
        wanted = self.groups if self.groups is not None else list(found)
        return {k: found[k] for k in wanted if found.get(k) is not None}


class PatternSet(BaseModel):
    """The patterns of one monitoring file, or of several merged.

    `include` names other pattern files (resolved by the loader) whose patterns
    come first; a later pattern with the same name replaces an earlier one, and
    `disable` drops patterns by name after merging. `catalogs` names message catalogs
    (resolved by the loader) whose patterns follow the file's own.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    include: list[str] = Field(default_factory=list)
    disable: list[str] = Field(default_factory=list)
    patterns: list[SignalPattern] = Field(default_factory=list)
    # Message catalogs (monitoring/catalogs/<name>.yaml, core/classify/catalog.py) whose
    # patterns follow this file's own: on a tie between two roots of one line, the file's wins.
    catalogs: list[str] = Field(default_factory=list)
    # The word model a failed attempt no pattern explains is guessed from (monitoring/<name>.json,
    # core/classify/vocabulary.py): a name, False for none; None leaves an included file's choice.
    vocabulary: str | bool | None = None

    _by_name: dict[str, SignalPattern] = PrivateAttr()
    _words: WordModel | None = PrivateAttr(default=None)  # loaded (the loader attaches it)
    _cache: dict[str, Any] = PrivateAttr(default_factory=dict)  # matcher state built by core.classify

    @property
    def cache(self) -> dict[str, Any]:
        """Derived, rebuildable data (a prepared matcher); not part of the value."""
        return self._cache

    @field_validator("vocabulary")
    @classmethod
    def _vocabulary_names_a_model(cls, value: str | bool | None) -> str | bool | None:
        # `true` names no model: left in, it would silently drop the one an included file named.
        if value is True:
            raise ValueError("expected the name of a word model (monitoring/<name>.json) or false, got true")
        return value

    def model_post_init(self, __context: Any) -> None:
        self._by_name = {p.name: p for p in self.patterns}

    @property
    def words(self) -> WordModel | None:
        """The word model for guesses (core/classify/vocabulary.py WordModel), or None: no guesses."""
        return self._words if self.vocabulary is not False else None

    def with_words(self, words: WordModel | None) -> PatternSet:
        """This set with the word model `vocabulary` names (attached by the loader)."""
        copy = self.model_copy()
        copy._words = words
        copy._cache = {}
        return copy

    def __len__(self) -> int:
        return len(self.patterns)

    def get(self, name: str) -> SignalPattern | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return [p.name for p in self.patterns]


def merge_pattern_sets(sets: Iterable[PatternSet]) -> PatternSet:
    """Merge in order: same name replaces (keeping the first position); disable drops."""
    merged: dict[str, SignalPattern] = {}
    disabled: set[str] = set()
    vocabulary: str | bool | None = None
    words: WordModel | None = None
    for ps in sets:
        for pattern in ps.patterns:
            merged[pattern.name] = pattern
            disabled.discard(pattern.name)
        disabled.update(ps.disable)
        if ps.vocabulary is not None:  # the last set that names one (or turns it off) decides
            vocabulary, words = ps.vocabulary, ps.words
    for name in disabled:
        merged.pop(name, None)
    result = PatternSet(patterns=list(merged.values()), vocabulary=vocabulary)
    return result.with_words(words) if words is not None else result


def as_pattern_set(patterns: PatternSet | Sequence[SignalPattern]) -> PatternSet:
    return patterns if isinstance(patterns, PatternSet) else PatternSet(patterns=list(patterns))


@dataclass(frozen=True, slots=True)
class Signal:
    """One log line that matched one pattern."""

    pattern: str  # the pattern's name
    error_type: str | None
    subsystem: str
    role: Role
    line: str  # the line, without its newline
    line_no: int  # 1-based, in the file or stream
    groups: Mapping[str, str] = field(default_factory=dict, hash=False)
    priority: int = 0
    teardown: bool = False
    rank: int | None = None  # from a `[rank3]:` (torchrun) or `3: ` (srun --label) prefix
    source: str | None = None  # file name, if known
    fallback: bool = False  # from a catch-all pattern (the generic exception line)
    teardown_start: TeardownStart | None = None  # the launcher started tearing the job down
    blames_node: NodeBlame | None = None  # its pattern's: how it singles out a node to blame
    warns_of_hang: bool = False  # its pattern's: the job is about to hang (core/watch/progress.py)
    # The host NCCL's `host:pid:tid [dev]` prefix names: the node that printed the line
    # (core/classify/prefixes.py nccl_host); None on a line without that prefix.
    nccl_host: str | None = None

    @property
    def is_cause_candidate(self) -> bool:
        """Could this signal ever be reported as a root cause?"""
        return self.role in ("root", "cascade") and not self.teardown and self.error_type is not None

    @property
    def is_fatal(self) -> bool:
        """Does this line alone say the attempt is over (not a catch-all exception line)?

        A generic `SomethingError: ...` line is also printed by runs that catch and log
        it; it counts once the launcher starts tearing the job down, or at the job's end.
        """
        return (self.is_cause_candidate and not self.fallback) or self.teardown_start == "worker_failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "error_type": self.error_type,
            "subsystem": self.subsystem,
            "role": self.role,
            "teardown": self.teardown,
            "priority": self.priority,
            "line_no": self.line_no,
            "line": self.line,
            "rank": self.rank,
            "groups": dict(self.groups),
            "source": self.source,
            "fallback": self.fallback,
            "teardown_start": self.teardown_start,
            "blames_node": self.blames_node,
            "warns_of_hang": self.warns_of_hang,
            "nccl_host": self.nccl_host,
        }


# --------------------------------------------------------------------------- prefilter literals


def required_literals(regex: str, ignore_case: bool = False) -> list[str]:
    """Literal strings of which every match must contain at least one.

    Found by walking the parsed regex: the longest run of literal characters at
    the top level (looking into groups and `{1,}` repeats), or, for an
    alternation, one literal per branch. [] when none is long enough: the
    pattern then runs on every line.
    """
    try:
        parsed = _sp.parse(regex, re.IGNORECASE if ignore_case else 0)
    except re.error:
        return []
    if parsed.state.flags & re.IGNORECASE and not ignore_case:
        return []  # an inline (?i): literals would be case-sensitive; don't guess
    found = _literals_of_sequence(list(parsed.data))
    return found if found and min(map(len, found)) >= MIN_KEYWORD_LEN else []


def _literals_of_sequence(items: list[tuple[Any, Any]]) -> list[str]:
    candidates: list[list[str]] = []
    run: list[str] = []
    for op, av in items:
        if op is _sc.LITERAL:
            run.append(chr(av))
            continue
        if run:
            candidates.append(["".join(run)])
            run = []
        inner = _literals_of_item(op, av)
        if inner:
            candidates.append(inner)
    if run:
        candidates.append(["".join(run)])
    return max(candidates, key=lambda alts: min(map(len, alts)), default=[])


def _literals_of_item(op: Any, av: Any) -> list[str]:
    if op is _sc.SUBPATTERN:
        _group, add_flags, _del_flags, sub = av
        return [] if add_flags & re.IGNORECASE else _literals_of_sequence(list(sub))
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT):
        low, _high, sub = av
        return _literals_of_sequence(list(sub)) if low >= 1 else []
    if op is _sc.BRANCH:
        _none, branches = av
        alts = [_literals_of_sequence(list(b)) for b in branches]
        if any(not a for a in alts):
            return []
        return [word for alt in alts for word in alt]
    return []
