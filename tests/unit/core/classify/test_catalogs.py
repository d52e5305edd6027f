"""Every entry of every message catalog (config/monitoring/catalogs/) classifies as listed.

The catalogs hold each emitter's messages from its source (Slurm, torch elastic, NVIDIA's Xid
table, CUDA/HIP, NCCL/gloo, the loss scalers, Open MPI and c10d, DataLoader, checkpoint
files). An entry's `example` line, classified with the shipped `megatron_production` set (as
`autoexp classify` does), must give the entry's class as the log's cause (roots and cascades),
no cause at all (info and teardown entries), and the blamed node in a `node` group when the
entry says it names one.
"""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import (
    CATALOG_DIR,
    load_catalog,
    load_patterns,
    monitoring_dirs,
)
from oellm_autoexp.core.classify.catalog import (
    Catalog,
    CatalogEntry,
    catalog_patterns,
    format_regex,
    keyword_of,
)
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.errors import UserError

PATTERNS = load_patterns(["megatron_production"])
DIRS = monitoring_dirs()
NAMES = sorted(p.stem for d in DIRS if (d / CATALOG_DIR).is_dir() for p in (d / CATALOG_DIR).glob("*.yaml"))
CATALOGS = {name: load_catalog(name, DIRS) for name in NAMES}
CASES = [(name, i, entry) for name, catalog in CATALOGS.items() for i, entry in enumerate(catalog.entries, 1)]


def test_every_catalog_is_used_by_the_shipped_patterns() -> None:
    """base.yaml lists every shipped catalog, so each one's patterns are in the default set."""
    names = set(PATTERNS.names())
    unused = [name for name in NAMES if f"{name}.1" not in names and name not in names]
    assert NAMES and unused == []


@pytest.mark.parametrize(("catalog", "index", "entry"), CASES, ids=[f"{c}.{i}" for c, i, _ in CASES])
def test_every_entry_classifies_as_listed(catalog: str, index: int, entry: CatalogEntry) -> None:
    """The entry's example gives its class as the cause (or none for info/teardown), by its own pattern."""
    signals = classify_lines([entry.example], PATTERNS)
    own_name = catalog if entry.xid is not None else f"{catalog}.{index}"  # all xid rows: one pattern
    own = [s for s in signals if s.pattern == own_name]
    assert own, f"{catalog}.{index}: its own pattern does not match {entry.example!r}"
    if entry.xid is not None:  # the row itself decides the code's class and role
        listed = entry.role in ("root", "cascade") and not entry.teardown
        assert (own[0].error_type, own[0].role) == (
            (entry.error_type, entry.role) if listed else (None, "info")
        )
    cause = log_cause(signals)
    if entry.role in ("root", "cascade") and not entry.teardown:
        assert cause is not None and cause.error_type == entry.error_type, (entry.example, cause)
    else:
        assert cause is None, (entry.example, cause)
    if entry.names_node:
        assert any(s.groups.get("node") for s in own), own


@pytest.mark.parametrize(
    ("fmt", "groups", "line", "expected"),
    [
        ("Task launch for %ps failed on node %s: %m", ["step", "node", "why"],
         "Task launch for StepId=23.0 failed on node hpc: Job prolog failed",
         {"step": "StepId=23.0", "node": "hpc", "why": "Job prolog failed"}),
        ("%lu > %lu, %5.2f%% done", ["a", "b", "pct"], "3 > 2, 12.50% done", {"a": "3", "b": "2", "pct": "12.50"}),
        ("at %p (x=%x)", ["-", "x"], "at 0x7f00 (x=0x1f)", {"x": "0x1f"}),
    ],
)  # fmt: skip
def test_a_format_becomes_a_regex_of_its_literals_and_conversions(
    fmt: str, groups: list[str], line: str, expected: dict[str, str]
) -> None:
    """Literal text is matched exactly, each conversion by what it prints, named as listed."""
    import re

    match = re.fullmatch(format_regex(fmt, groups), line)
    assert match is not None and match.groupdict() == expected


def test_a_format_without_a_long_literal_is_refused() -> None:
    """A format whose literal text is too short to prefilter on cannot be a catalog entry."""
    with pytest.raises(ValueError, match="literal run"):
        keyword_of("%s: %s")
    with pytest.raises(ValueError, match="literal run"):
        CatalogEntry(format="%s: %d", example="a: 1", error_type="oom")


def test_all_xid_rows_are_one_pattern_that_reads_the_code() -> None:
    """One pattern for the whole table; `caused by previous Xid 13` takes 13's row, 130 (no row) is the GPU's."""
    catalog = Catalog(
        name="t",
        source="s",
        version="v",
        entries=[
            CatalogEntry(xid=79, example="x", error_type="gpu_hardware"),
            CatalogEntry(xid=45, example="x", error_type="gpu_hardware", role="cascade"),
            CatalogEntry(xid=13, example="x", error_type="cuda_error"),
            CatalogEntry(xid=63, example="x", role="info"),
        ],
    )
    patterns = catalog_patterns(catalog)
    assert [p.name for p in patterns] == ["t"]
    reading = {line: [(s.error_type, s.role) for s in classify_lines([line], patterns)] for line in XID_FORMS}
    assert reading == XID_FORMS


# Each form an Xid is printed in (quoted forms: tests/corpus/xid.yaml), read by the table above.
XID_FORMS = {
    "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 79": [("gpu_hardware", "root")],
    "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 13": [("cuda_error", "root")],
    "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 130": [("gpu_hardware", "root")],
    "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001": [("gpu_hardware", "cascade")],
    "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics Exception": [("cuda_error", "root")],
    "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=python, Row Remapper": [(None, "info")],
    "May 10 22:25:01 gpu7 kernel: [176830.774761] NVRM: Xid (0000:03:00): 13, 0003 00000000": [("cuda_error", "root")],
    "GPU:4 PCI:0000:c4:00.0 Detected XID 31 for GPU 4 Please consult the documentation": [("gpu_hardware", "root")],
    "XidCriticalError: Xid=79 on Device=GPU-d23d91a3; marking device as unhealthy.": [("gpu_hardware", "root")],
    "DCGM_FR_XID_ERROR Detected XID 13 for GPU 0": [("cuda_error", "root")],
    "NVRM: GPU at PCI:0000:01:00: GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513": [],
}  # fmt: skip


def test_the_xid_pattern_names_the_node_of_a_syslog_line() -> None:
    """`host kernel: NVRM: Xid ...`: the host is the node to blame (core/decide/node_blame.py reads `xid`)."""
    line = "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)"
    (signal,) = [s for s in classify_lines([line], PATTERNS) if s.pattern == "xid"]
    assert (signal.groups.get("node"), signal.error_type) == ("worker4", "gpu_hardware")


def test_a_broken_catalog_is_one_clear_error(tmp_path) -> None:
    """A catalog entry with a bad key names the file, the entry and the key."""
    folder = tmp_path / CATALOG_DIR
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        "name: bad\nsource: s\nversion: v\nentries:\n  - format: 'Something failed: %s'\n    example: x\n    role: root\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError, match=r"bad\.yaml: entries\[0\].*error_type"):
        load_catalog("bad", [tmp_path])


def test_a_shared_keyword_is_used_when_the_format_holds_it() -> None:
    """Entries holding a catalog's shared literal prefilter on it; others on their longest literal."""
    shared = ["NCCL WARN"]
    assert keyword_of("NCCL WARN Call to ibv_%s failed with error %s", shared) == "NCCL WARN"
    assert keyword_of("Gloo connectFullMesh failed with %s", shared) == "Gloo connectFullMesh failed with"
    # `NCCL WARN` is not inside one literal run here: the longest run is the keyword
    assert keyword_of("%s NCCL failed %s WARN", ["NCCL WARN"]) == "NCCL failed"


@pytest.mark.parametrize(
    "line",
    [
        # NCCL's INFO twins of events the catalog reads at WARN (NVIDIA/nccl v2.30.7 init.cc, proxy.cc, and
        # transport/net_ib/p2p_resiliency*.cc: >= 2.29 recovers from a failed NIC and says so at INFO)
        "gpu4:81:113 [2] NCCL INFO Detected mixed local Net device counts across ranks (min 7, max 8). "
        "Ignoring due to NCCL_IGNORE_NET_MISMATCH=1.",
        "gpu4:81:113 [2] NCCL INFO [Service thread] Accept failed Resource temporarily unavailable",
        "gpu4:81:113 [2] NCCL INFO NET/IB: send: The error is not fatal. Trying to continue...",
        "gpu4:81:113 [2] NCCL INFO NET/IB: send: Marking device 1 as permanently failed (send comm=0x7f3c1c0)",
        "gpu4:81:113 [2] NCCL INFO NET/IB: recv: Port recovery attempt #2 failed for devIndex=1 (comm=0x7f3c1c0)",
        "gpu4:81:113 [2] NCCL INFO Cuda failure 'out of memory'",  # CUDACHECKIGNORE: NCCL goes on without it
        # healthy DeepSpeed skips: hysteresis counting down, a bf16 overflow skip
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. "
        "Reducing hysteresis to 1",
        "[2024-05-02 11:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step.",
    ],
)
def test_healthy_twins_of_catalog_messages_stay_healthy(line: str) -> None:
    """A line NCCL or a trainer prints while it carries on is no cause, although its words resemble one."""
    assert log_cause(classify_lines([line], PATTERNS)) is None


NCCL_HOST_CASES = [(name, i, e) for name, i, e in CASES if e.blames_node == "nccl_host"]


@pytest.mark.parametrize(
    ("catalog", "index", "entry"), NCCL_HOST_CASES, ids=[f"{c}.{i}" for c, i, _ in NCCL_HOST_CASES]
)
def test_an_entry_that_blames_the_nccl_host_names_its_prefix_host(
    catalog: str, index: int, entry: CatalogEntry
) -> None:
    """A line only the failing node prints (its own HCA, GPU pair, driver) blames the host of NCCL's prefix."""
    assert NCCL_HOST_CASES  # the NVML, NVLink and IB fatal-event entries of nccl_gloo.yaml
    own = [s for s in classify_lines([entry.example], PATTERNS) if s.pattern == f"{catalog}.{index}"]
    assert own and own[0].blames_node == "nccl_host"
    assert own[0].nccl_host == entry.example.split(":", 1)[0]
