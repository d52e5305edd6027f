"""The log tailer on real files, as one contract run against the real inotify observer and the
polling observer. Waits are polling loops with deadlines, never sleeps that assume a fast machine."""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oellm_autoexp.adapters.logs.tail import (
    FileTail,
    LogDeleted,
    LogEvent,
    LogLines,
    LogRotated,
    LogTailer,
    LogTruncated,
    MemoryOffsetStore,
    OffsetStore,
)
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.host.fs_kind import WatchMode

DEADLINE_S = 15.0  # generous: a loaded CI machine, a 10 MB line
POLL_S = 0.05  # the polling observer's interval in these tests
THREAD_GRACE_S = 5.0


class Events:
    """Collects a tailer's events; `until` waits, with a deadline, for a condition on them."""

    def __init__(self) -> None:
        self.queue: queue.Queue[LogEvent] = queue.Queue()
        self.seen: list[LogEvent] = []

    def put(self, event: LogEvent) -> None:
        self.queue.put(event)

    def until(self, done: Callable[[list[LogEvent]], bool], timeout_s: float = DEADLINE_S) -> list[LogEvent]:
        deadline = time.monotonic() + timeout_s
        while not done(self.seen):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such events within {timeout_s} s; saw {self.seen!r}")
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.queue.get(timeout=min(left, 0.5)))
        return self.seen

    def drain(self) -> list[LogEvent]:
        while True:
            try:
                self.seen.append(self.queue.get_nowait())
            except queue.Empty:
                return self.seen

    def lines(self) -> list[str]:
        return [line for e in self.seen if isinstance(e, LogLines) for line in e.lines]

    def has_lines(self, *expected: str) -> Callable[[list[LogEvent]], bool]:
        return lambda _: self.lines()[-len(expected) :] == list(expected)


@pytest.fixture(autouse=True)
def _no_threads_left() -> Iterator[None]:
    """Stricter than the repo-wide check: daemon threads (watchdog's) must be joined too."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE_S
    while (left := [t for t in threading.enumerate() if t not in before]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], f"threads left running: {[t.name for t in left]}"


@pytest.fixture(params=[WatchMode.INOTIFY, WatchMode.POLL])
def mode(request: pytest.FixtureRequest) -> WatchMode:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def tailer(mode: WatchMode, events: Events) -> Iterator[LogTailer]:
    with LogTailer(events.put, mode=mode, poll_interval_s=POLL_S) as t:
        yield t


def _append(path: Path, data: bytes | str) -> None:
    with open(path, "ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _watch(tailer: LogTailer, path: Path) -> None:
    tailer.watch(path)
    assert tailer.sync(DEADLINE_S)


def test_appended_lines_arrive_with_contiguous_offsets(
    tailer: LogTailer, events: Events, tmp_path: Path
) -> None:
    """Lines written after the watch started arrive without any rescan; offsets cover the file exactly."""
    log = tmp_path / "train.log"
    _append(log, "first\n")
    _watch(tailer, log)
    _append(log, "second\nthird\r\n")
    events.until(events.has_lines("first", "second", "third"))
    chunks = [e for e in events.seen if isinstance(e, LogLines)]
    assert chunks[0].start_offset == 0
    assert all(a.end_offset == b.start_offset for a, b in itertools.pairwise(chunks))
    assert chunks[-1].end_offset == log.stat().st_size


def test_files_in_several_directories(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """Each directory is watched once; lines carry the path they came from."""
    logs = [tmp_path / d / "slurm.out" for d in ("a", "b")]
    for log in logs:
        log.parent.mkdir()
        _watch(tailer, log)
    for log in logs:
        _append(log, f"from {log.parent.name}\n")
    events.until(lambda seen: len(events.lines()) == 2)
    got = {e.path: e.lines for e in events.seen if isinstance(e, LogLines)}
    assert got == {str(logs[0]): ("from a",), str(logs[1]): ("from b",)}


def test_partial_line_waits_for_its_newline(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """An unfinished last line is not emitted, even by a rescan, until its newline is written."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, "done\npart")
    events.until(events.has_lines("done"))
    tailer.rescan()
    assert tailer.sync(DEADLINE_S)
    events.drain()
    assert events.lines() == ["done"]
    _append(log, "ial\n")
    events.until(events.has_lines("done", "partial"))


def test_flush_emits_the_unfinished_last_line(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """At job end the last line may lack a newline: flush() hands it over, once."""
    log = tmp_path / "x.log"
    _append(log, "ok\nKilled")
    _watch(tailer, log)
    events.until(events.has_lines("ok"))
    tailer.flush(log)
    events.until(events.has_lines("ok", "Killed"))
    tailer.flush(log)
    assert tailer.sync(DEADLINE_S)
    events.drain()
    assert events.lines() == ["ok", "Killed"]


def test_truncation_restarts_from_the_beginning(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """A file cut shorter than what was read (requeue with --open-mode=truncate) is read again from 0."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, "old line one\nold line two\n")
    events.until(events.has_lines("old line one", "old line two"))
    with open(log, "wb") as f:
        f.write(b"new\n")
    seen = events.until(events.has_lines("new"))
    kinds = [type(e) for e in seen]
    assert kinds.index(LogTruncated) < len(kinds) - 1


def test_rotation_by_rename_reads_the_old_rest_then_the_new_file(
    tailer: LogTailer, events: Events, tmp_path: Path
) -> None:
    """mv x.log x.log.1 + a new x.log: the old file's last lines are not lost, the new one starts at 0."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, "old1\n")
    events.until(events.has_lines("old1"))
    _append(log, "old2\n")
    log.rename(tmp_path / "x.log.1")
    _append(log, "fresh\n")
    seen = events.until(events.has_lines("fresh"))
    assert events.lines() == ["old1", "old2", "fresh"]
    fresh = seen[-1]
    assert LogRotated(str(log)) in seen[: seen.index(fresh)]
    assert isinstance(fresh, LogLines) and (fresh.start_offset, fresh.inode) == (0, log.stat().st_ino)


def test_deletion_then_recreation(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """A deleted log is reported; a file created again at the path is a new file, read from 0."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, "a fairly long first line\n")
    events.until(events.has_lines("a fairly long first line"))
    log.unlink()
    events.until(lambda seen: LogDeleted(str(log)) in seen)
    _append(log, "again\n")
    seen = events.until(events.has_lines("again"))
    assert LogRotated(str(log)) in seen[seen.index(LogDeleted(str(log))) :]


def test_a_log_that_appears_late_is_picked_up(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """Watching a path before the job starts writing: the file's creation is noticed by the observer."""
    log = tmp_path / "slurm-123.out"
    _watch(tailer, log)
    assert events.drain() == []
    _append(log, "job started\n")
    events.until(events.has_lines("job started"))


def test_a_log_in_a_directory_that_appears_late_is_found_by_rescan(
    tailer: LogTailer, events: Events, tmp_path: Path
) -> None:
    """A missing directory cannot be watched yet; the periodic rescan schedules it and reads the file."""
    log = tmp_path / "later" / "x.log"
    _watch(tailer, log)
    log.parent.mkdir()
    _append(log, "one\n")
    tailer.rescan()
    events.until(events.has_lines("one"))
    _append(log, "two\n")  # from now on the observer sees it
    events.until(events.has_lines("one", "two"))


def test_binary_garbage_is_decoded_with_replacement(
    tailer: LogTailer, events: Events, tmp_path: Path
) -> None:
    """Invalid UTF-8 and NUL bytes become U+FFFD and \\x00; the lines after them arrive intact."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, bytes(range(256)).replace(b"\n", b"") + b"\xff\xfe\xc3\n" + "après\n".encode())
    events.until(events.has_lines("après"))
    garbage = events.lines()[0]
    assert "\ufffd" in garbage and "\x00" in garbage


def test_a_10_mb_line_is_cut_and_the_next_line_still_arrives(
    tailer: LogTailer, events: Events, tmp_path: Path
) -> None:
    """A runaway single line keeps its first 64 KiB and a marker; the offsets still match the file."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, b"x" * (10 << 20) + b"\nnext\n")
    events.until(events.has_lines("next"), timeout_s=60)
    big = next(e for e in events.seen if isinstance(e, LogLines) and e.lines[0].startswith("x"))
    assert big.truncated
    assert big.lines[0].startswith("x" * (64 * 1024) + " [... ")
    assert len(big.lines[0]) < 65 * 1024
    last = events.seen[-1]
    assert isinstance(last, LogLines) and last.end_offset == log.stat().st_size


def test_reading_a_huge_line_holds_bounded_memory(tmp_path: Path) -> None:
    """Memory is bounded by the chunk size and the line cap, not by the line (checked with tracemalloc)."""
    log = tmp_path / "x.log"
    _append(log, b"y" * (20 << 20))  # 20 MB and no newline yet
    tail = FileTail(str(log), None)
    tracemalloc.start()
    try:
        more = True
        while more:
            events, more = tail.read_new(max_bytes=4 << 20)
            assert events == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    assert tail.offset == 20 << 20


@pytest.fixture(params=["memory", "sqlite"])
def offsets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OffsetStore]:
    if request.param == "memory":
        yield MemoryOffsetStore()
        return
    with SQLiteStore(tmp_path / ".oellm_state") as store:
        yield store


def test_a_restarted_tailer_continues_where_the_last_one_stopped(
    mode: WatchMode, offsets: OffsetStore, tmp_path: Path
) -> None:
    """Saved offsets: old lines are not emitted again; a line unfinished at shutdown is read whole."""
    log = tmp_path / "x.log"
    first = Events()
    with LogTailer(first.put, offsets, mode=mode, poll_interval_s=POLL_S) as t:
        _watch(t, log)
        _append(log, "a\nb\npar")
        first.until(first.has_lines("a", "b"))
        assert t.sync(DEADLINE_S)
    _append(log, "tial\nc\n")
    second = Events()
    with LogTailer(second.put, offsets, mode=mode, poll_interval_s=POLL_S) as t:
        _watch(t, log)
        second.until(second.has_lines("partial", "c"))
    assert second.lines() == ["partial", "c"]


def test_without_commit_on_emit_only_committed_lines_are_skipped_after_restart(
    mode: WatchMode, tmp_path: Path
) -> None:
    """With commit_on_emit=False the consumer commits what it handled; the rest is delivered again."""
    log = tmp_path / "x.log"
    offsets = MemoryOffsetStore()
    first = Events()
    with LogTailer(first.put, offsets, mode=mode, poll_interval_s=POLL_S, commit_on_emit=False) as t:
        _watch(t, log)
        _append(log, "handled\n")
        first.until(first.has_lines("handled"))
        t.commit(next(e for e in first.seen if isinstance(e, LogLines)))
        _append(log, "not handled\n")
        first.until(first.has_lines("handled", "not handled"))
    second = Events()
    with LogTailer(second.put, offsets, mode=mode, poll_interval_s=POLL_S) as t:
        _watch(t, log)
        second.until(second.has_lines("not handled"))
    assert second.lines() == ["not handled"]


def test_a_file_replaced_while_the_monitor_was_down_is_read_from_zero(
    mode: WatchMode, tmp_path: Path
) -> None:
    """The saved offset belongs to an inode: another file at the path is a rotation, not a resume."""
    log = tmp_path / "x.log"
    offsets = MemoryOffsetStore()
    _append(log, "old old old old\n")
    offsets.save_offset(str(log), log.stat().st_ino, log.stat().st_size)
    log.rename(tmp_path / "x.log.1")  # keeps the old inode busy, so the new file gets another
    _append(log, "new\n")
    got = Events()
    with LogTailer(got.put, offsets, mode=mode, poll_interval_s=POLL_S) as t:
        _watch(t, log)
        seen = got.until(got.has_lines("new"))
    assert seen[0] == LogRotated(str(log))


def test_unwatch_reads_to_the_end_and_stops(tailer: LogTailer, events: Events, tmp_path: Path) -> None:
    """unwatch() delivers what is left (unfinished line included); later writes are ignored."""
    log = tmp_path / "x.log"
    _watch(tailer, log)
    _append(log, "end\nno newline")
    tailer.unwatch(log)
    events.until(events.has_lines("end", "no newline"))
    assert tailer.watched() == frozenset()
    _append(log, "ignored\n")
    tailer.rescan()
    assert tailer.sync(DEADLINE_S)
    events.drain()
    assert "ignored" not in events.lines()


def test_a_failing_sink_does_not_stop_tailing(mode: WatchMode, tmp_path: Path) -> None:
    """An exception in the consumer is logged; later lines are still delivered (and that batch not committed)."""
    log = tmp_path / "x.log"
    good = Events()
    calls = 0

    def flaky(event: LogEvent) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("consumer bug")
        good.put(event)

    offsets = MemoryOffsetStore()
    with LogTailer(flaky, offsets, mode=mode, poll_interval_s=POLL_S) as t:
        _watch(t, log)
        _append(log, "lost\n")
        assert t.sync(DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while calls == 0 and time.monotonic() < deadline:
            t.rescan()
            t.sync(DEADLINE_S)
        _append(log, "kept\n")
        good.until(good.has_lines("kept"))
    saved = offsets.load_offset(str(log))
    assert saved is not None and saved[1] == log.stat().st_size


def test_auto_mode_follows_the_mount_table(tmp_path: Path) -> None:
    """auto: a directory on a network filesystem (per mountinfo) is polled, a local one uses inotify."""
    shared, local = tmp_path / "shared", tmp_path / "local"
    shared.mkdir()
    local.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
        f"60 22 0:50 / {os.path.realpath(shared)} rw,relatime shared:40 - lustre mds@o2ib:/scratch rw\n"
    )
    with LogTailer(Events().put, mode=WatchMode.AUTO, mountinfo_path=mountinfo) as t:
        _watch(t, shared / "a.log")
        _watch(t, local / "b.log")
        assert t.watch_mode(shared) is WatchMode.POLL
        assert t.watch_mode(local) is WatchMode.INOTIFY


def test_close_is_idempotent_and_works_without_start(events: Events) -> None:
    """close() twice, or on a tailer never started, neither hangs nor raises."""
    LogTailer(events.put).close()
    t = LogTailer(events.put).start()
    t.close()
    t.close()
