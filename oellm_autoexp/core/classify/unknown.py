"""Failed attempts with no recognised cause: the lines that might say why, and a pattern to add. No I/O.

`autoexp classify --unknown` lists, across sessions, the attempts that failed while their log
gave no cause. For each it shows the lines most likely to say why (the last ones that read
like an error, else the last lines) and a one-line pattern for the best of them, written for
the bare line (launcher prefixes stripped) with its variable parts (numbers, hex, paths,
quoted strings) generalised, so a user can turn it into a pattern file entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from oellm_autoexp.core.classify.prefixes import strip_prefix

SHOWN_LINES = 8  # lines shown per unknown attempt
RANK_TAIL_LINES = 5  # `autoexp explain`: the last lines shown of each rank's output
UNKNOWN_HINT = "autoexp classify --unknown"  # lists such lines across sessions, with a pattern to add
MAX_PATTERN_CHARS = 160  # a suggested regex covers at most this much of the line

# Words that make a line read like the reason a process ended.
_ERRORISH = re.compile(
    r"\b(?:error|errors|failed|failure|fatal|exception|abort(?:ed|ing)?|killed|terminated|traceback|"
    r"segmentation|core dumped|not found|no such|denied|refused|timed? ?out|cannot|unable)\b",
    re.IGNORECASE,
)
_TIMESTAMP = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?|[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+)\s*"
)
# Variable parts, most specific first: (regex of the part, what replaces it in the pattern).
_VARIABLE = (
    (re.compile(r"'[^']*'|\"[^\"]*\""), "__QUOTED__"),
    (re.compile(r"(?:/[\w.+-]+){2,}/?"), "__PATH__"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "__HEX__"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "__NUM__"),
)
_REPLACEMENT = {
    "__QUOTED__": r"(['\"]).*?\1",
    "__PATH__": r"\S+",
    "__HEX__": r"0x[0-9a-fA-F]+",
    "__NUM__": r"[\d.]+",
}


@dataclass(frozen=True)
class Suggestion:
    """A pattern entry for a line no pattern explains."""

    line: str  # the line it was written for
    regex: str
    keyword: str  # the longest literal run: the pattern's prefilter keyword


def errorish(line: str) -> bool:
    """Does the line read like the reason a process ended (an error word: `failed`, `unable`, ...)?"""
    return _ERRORISH.search(line) is not None


def telling_lines(lines: Sequence[str], limit: int = SHOWN_LINES) -> list[str]:
    """The lines most likely to say why the process ended: the last error-like ones, else the last ones."""
    kept = [line.rstrip("\r\n") for line in lines if line.strip()]
    errorish_lines = [line for line in kept if errorish(line)]
    return (errorish_lines or kept)[-limit:]


def suggest_pattern(line: str) -> Suggestion | None:
    """A regex for `line` without its launcher prefix and time stamp, its variable parts generalised.

    None when the line has no literal text long enough to prefilter on.
    """
    body = _TIMESTAMP.sub("", strip_prefix(line)[0]).strip()[:MAX_PATTERN_CHARS]
    marked = body
    for variable, mark in _VARIABLE:
        marked = variable.sub(mark, marked)
    pieces = re.split(r"(__QUOTED__|__PATH__|__HEX__|__NUM__)", marked)
    literals = [p.strip() for p in pieces if p and p not in _REPLACEMENT]
    keyword = max(literals, key=len, default="")
    if len(keyword) < 6:
        return None
    regex = "".join(_REPLACEMENT.get(p, _escape(p)) for p in pieces if p)
    return Suggestion(line=line, regex=regex, keyword=keyword)


def _escape(text: str) -> str:
    """`text` as a regex, only its metacharacters escaped (readable in a pattern file)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


def pattern_entry(suggestion: Suggestion, name: str) -> str:
    """The suggestion as one YAML flow mapping for a pattern file's `patterns:` list."""
    regex = suggestion.regex.replace("'", "''")
    keyword = suggestion.keyword.replace("'", "''")
    return f"- {{name: {name}, regex: '{regex}', keywords: ['{keyword}'], error_type: TODO}}"


def rank_tails(lines: Sequence[str], per_rank: int = RANK_TAIL_LINES) -> list[tuple[int | None, list[str]]]:
    """The last `per_rank` non-empty lines of each rank's output in `lines`, by rank.

    A line's rank is the one its launcher prefix names (`[rank3]:`, srun's `3: `, mpirun's
    `[1,3]<stderr>:`; core/classify/prefixes.py); lines without one (the launcher, the batch
    script, a single-process job) are their own group, listed first as rank None.
    """
    by_rank: dict[int | None, list[str]] = {}
    for line in lines:
        text = line.rstrip("\r\n")
        if text.strip():
            by_rank.setdefault(strip_prefix(text)[1], []).append(text)
    order = sorted(by_rank, key=lambda r: -1 if r is None else r)
    return [(rank, by_rank[rank][-per_rank:]) for rank in order]
