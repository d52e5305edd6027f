"""Tail job logs: watchdog says a file changed, ONE worker thread reads it.

Threads and who owns what:
- watchdog's observer threads only put a request ("this path changed") on the
  tailer's request queue; they never read a file or touch reading state.
- the tailer's worker thread owns every FileTail (offset, inode, partial line),
  reads files, and hands events to the sink in file order.
- every public method (watch, unwatch, flush, rescan, sync) just queues a
  request, so it is safe from any thread (the monitor loop, an APScheduler job).

Which observer watches a directory: inotify where every write passes through
this kernel, watchdog's PollingObserver elsewhere (NFS, Lustre, GPFS, BeeGFS,
CIFS, FUSE...: inotify never sees another node's writes). See core/host/fs_kind.py.
rescan() reads every file regardless, for whatever an observer missed.

Offsets: the byte just past the last complete line handed to the sink is saved
(with the file's inode) through an OffsetStore, after the sink returns
(`commit_on_emit=True`) or when the consumer calls commit(event). A restarted
monitor resumes there: lines are delivered at least once, never skipped.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from oellm_autoexp.adapters.fs.mountinfo import MOUNTINFO_PATH, watch_mode_for
from oellm_autoexp.core.host.fs_kind import WatchMode

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 2.0  # PollingObserver: seconds between two stats of a watched directory
CHUNK_BYTES = 1 << 20  # bytes read per read() call
MAX_LINE_BYTES = 64 * 1024  # longer lines keep their first MAX_LINE_BYTES, then a marker
MAX_BYTES_PER_WAKE = 16 << 20  # then other files get a turn; the rest is read on the next turn
STOP_JOIN_TIMEOUT_S = 10.0  # close() waits this long for the worker to finish its batch
LINE_CUT_MARKER = " [... {dropped} bytes cut by autoexp]"

# Opened/closed-without-write events are left out: our own reads cause them.
_WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
]


@dataclass(frozen=True)
class LogLines:
    """Complete lines appended to a log, decoded as UTF-8 (bad bytes become U+FFFD)."""

    path: str  # the watched path, absolute
    lines: tuple[str, ...]  # without their newline (and without a trailing \r)
    start_offset: int  # byte offset of the first line's first byte
    end_offset: int  # byte offset just past the last line's newline: what commit() saves
    inode: int  # the file these bytes were read from
    truncated: bool = False  # a line longer than the cap was cut (first bytes + marker kept)


@dataclass(frozen=True)
class LogTruncated:
    """The file shrank below what was read: it is read again from byte 0."""

    path: str


@dataclass(frozen=True)
class LogRotated:
    """The path names a different file (new inode) than before: read from byte 0."""

    path: str


@dataclass(frozen=True)
class LogDeleted:
    """The path no longer names a file; if one appears again, LogRotated comes first."""

    path: str


LogEvent = LogLines | LogTruncated | LogRotated | LogDeleted
Sink = Callable[[LogEvent], object]


class OffsetStore(Protocol):
    """Where consumed offsets survive a monitor restart (SQLiteStore implements it)."""

    def load_offset(self, path: str) -> tuple[int, int] | None:
        """(inode, offset) saved for `path`, or None."""
        ...

    def save_offset(self, path: str, inode: int, offset: int) -> None: ...


class MemoryOffsetStore:
    """An OffsetStore in a dict, for tests and one-shot commands."""

    def __init__(self) -> None:
        self._offsets: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def load_offset(self, path: str) -> tuple[int, int] | None:
        with self._lock:
            return self._offsets.get(path)

    def save_offset(self, path: str, inode: int, offset: int) -> None:
        with self._lock:
            self._offsets[path] = (inode, offset)


class FileTail:
    """What has been read of one path. Not thread-safe: only the worker uses it."""

    def __init__(self, path: str, saved: tuple[int, int] | None, *, max_line_bytes: int = MAX_LINE_BYTES):
        self.path = path
        self.inode: int | None = saved[0] if saved else None
        self.offset = saved[1] if saved else 0  # next byte to read
        self._max_line = max_line_bytes
        self._line = bytearray()  # the incomplete last line, at most _max_line bytes
        self._line_start = self.offset  # where that line starts in the file
        self._dropped = 0  # bytes of that line beyond the cap
        self._present = self.inode is not None  # was a file at the path last time we looked
        self._gone = False  # we saw the path missing: whatever appears next is a new file

    def read_new(
        self, max_bytes: int = MAX_BYTES_PER_WAKE, chunk_bytes: int = CHUNK_BYTES
    ) -> tuple[list[LogEvent], bool]:
        """Read what was appended; returns the events and whether bytes may remain."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below, after fstat
        except FileNotFoundError:
            return self._on_missing(), False
        with f:
            events = self._check_identity(os.fstat(f.fileno()))
            more = self._read_chunks(f, events, max_bytes, chunk_bytes)
        return events, more

    def flush(self) -> list[LogEvent]:
        """Emit the incomplete last line as a line (the job ended; no newline will come)."""
        if not self._line and not self._dropped:
            return []
        line, cut = self._take_line()
        event = LogLines(self.path, (line,), self._line_start, self.offset, self.inode or 0, cut)
        self._line_start = self.offset
        return [event]

    def _on_missing(self) -> list[LogEvent]:
        if not self._present:
            return []
        self._present, self._gone = False, True
        return [*self._drain_renamed(), *self.flush(), LogDeleted(self.path)]

    def _check_identity(self, st: os.stat_result) -> list[LogEvent]:
        """Notice a new file at the path (rotation) or a shrunk one (truncation)."""
        gone, self._present, self._gone = self._gone, True, False
        if gone or (self.inode is not None and st.st_ino != self.inode):
            events = [*self._drain_renamed(), *self.flush(), LogRotated(self.path)]
        elif st.st_size < self.offset:
            events = [*self.flush(), LogTruncated(self.path)]
        else:
            self.inode = st.st_ino
            return []
        self._restart_at_zero(st.st_ino)
        return events

    def _drain_renamed(self) -> list[LogEvent]:
        """Read the rest of our file if it was renamed within its directory (x.log -> x.log.1).

        Found by inode, so it works whatever order the rename and the new file's
        events arrive in, and for a rotation that happened while we were down.
        """
        old = self._find_by_inode()
        events: list[LogEvent] = []
        if old is None:
            return events
        try:
            with open(old, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_ino == self.inode and st.st_size >= self.offset:
                    while self._read_chunks(f, events, MAX_BYTES_PER_WAKE, CHUNK_BYTES):
                        pass
        except OSError:  # gone again: nothing more to read
            pass
        return events

    def _find_by_inode(self) -> str | None:
        if self.inode is None:
            return None
        try:
            with os.scandir(os.path.dirname(self.path)) as entries:
                for entry in entries:
                    if entry.inode() == self.inode and entry.path != self.path and entry.is_file():
                        return entry.path
        except OSError:
            return None
        return None

    def _restart_at_zero(self, inode: int) -> None:
        self.inode, self.offset, self._line_start = inode, 0, 0
        self._line.clear()
        self._dropped = 0

    def _read_chunks(self, f: BinaryIO, events: list[LogEvent], max_bytes: int, chunk_bytes: int) -> bool:
        """Append LogLines for whole lines read from `f`; True if the byte budget ran out."""
        f.seek(self.offset)
        budget = max_bytes
        while budget > 0:
            chunk = f.read(min(chunk_bytes, budget))
            if not chunk:
                return False
            budget -= len(chunk)
            event = self._consume(chunk)
            if event:
                events.append(event)
        return True

    def _consume(self, chunk: bytes) -> LogLines | None:
        """Split a chunk into lines; the unfinished tail waits in _line."""
        start, lines, cut_any = self._line_start, [], False
        pos = 0
        while (nl := chunk.find(b"\n", pos)) >= 0:
            self._append(chunk[pos:nl])
            line, cut = self._take_line()
            lines.append(line)
            cut_any |= cut
            pos = nl + 1
        self._append(chunk[pos:])
        chunk_start = self.offset
        self.offset += len(chunk)
        if not lines:
            return None
        self._line_start = chunk_start + pos
        return LogLines(self.path, tuple(lines), start, self._line_start, self.inode or 0, cut_any)

    def _append(self, data: bytes) -> None:
        room = self._max_line - len(self._line)
        self._line += data[:room]
        self._dropped += max(0, len(data) - room)

    def _take_line(self) -> tuple[str, bool]:
        raw = bytes(self._line).removesuffix(b"\r")
        text = raw.decode("utf-8", errors="replace")
        cut = self._dropped > 0
        if cut:
            text += LINE_CUT_MARKER.format(dropped=self._dropped)
        self._line.clear()
        self._dropped = 0
        return text, cut


@dataclass(frozen=True)
class _Request:
    kind: str  # changed | watch | unwatch | flush | rescan | sync | stop
    path: str = ""
    flush: bool = False  # for "unwatch": emit the incomplete last line first
    done: threading.Event | None = field(default=None, compare=False)  # for "sync"


class _WakeHandler(FileSystemEventHandler):
    """Runs in observer threads: filters by path and queues a request, nothing else."""

    def __init__(self, requests: queue.SimpleQueue[_Request], watched: Callable[[], frozenset[str]]):
        self._requests = requests
        self._watched = watched

    def on_any_event(self, event: FileSystemEvent) -> None:
        watched = self._watched()
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(event.dest_path) if event.event_type == "moved" else ""
        for path in (src, dest):
            if path in watched:
                self._requests.put(_Request("changed", path))


class _DirWatches:
    """Which directories are scheduled on which observer. Worker thread only."""

    def __init__(self, handler: _WakeHandler, mode: WatchMode, poll_interval_s: float, mountinfo: Path):
        self._handler, self._mode, self._poll_s, self._mountinfo = handler, mode, poll_interval_s, mountinfo
        self._observers: dict[WatchMode, BaseObserver] = {}
        self._scheduled: dict[str, object] = {}  # dir -> ObservedWatch
        self.modes: dict[str, WatchMode] = {}  # dir -> the mode it is watched with

    def ensure(self, directory: str) -> bool:
        """Schedule `directory` if not yet; False if it does not exist (retried by rescan)."""
        if directory in self._scheduled:
            return True
        if not os.path.isdir(directory):
            return False
        mode = watch_mode_for(Path(directory), self._mode, self._mountinfo)
        try:
            watch = self._observer(mode).schedule(self._handler, directory, event_filter=_WATCHED_EVENTS)
        except OSError as exc:  # e.g. the inotify instance limit: polling still works
            log.warning("inotify unavailable for %s (%s); polling it instead", directory, exc)
            mode = WatchMode.POLL
            watch = self._observer(mode).schedule(self._handler, directory, event_filter=_WATCHED_EVENTS)
        self._scheduled[directory], self.modes[directory] = watch, mode
        return True

    def drop(self, directory: str) -> None:
        watch = self._scheduled.pop(directory, None)
        mode = self.modes.pop(directory, None)
        if watch is not None and mode is not None:
            self._observers[mode].unschedule(watch)  # type: ignore[arg-type]

    def _observer(self, mode: WatchMode) -> BaseObserver:
        if mode not in self._observers:
            observer = PollingObserver(timeout=self._poll_s) if mode is WatchMode.POLL else Observer()
            observer.daemon = True
            observer.start()
            self._observers[mode] = observer
        return self._observers[mode]

    def close(self) -> None:
        for observer in self._observers.values():
            observer.stop()
        for observer in self._observers.values():
            observer.join()
        self._observers.clear()
        self._scheduled.clear()


class LogTailer:
    """Tails many log files and hands LogEvents to `sink` from one worker thread.

    Use as a context manager (or start()/close()). `sink` may be a callback or
    a `queue.Queue.put`; it runs in the worker thread. With commit_on_emit the
    offset of each LogLines is saved once the sink has returned; otherwise the
    consumer calls commit(event) after handling the event.
    """

    def __init__(
        self,
        sink: Sink,
        offsets: OffsetStore | None = None,
        *,
        mode: WatchMode | str = WatchMode.AUTO,
        poll_interval_s: float = POLL_INTERVAL_S,
        max_line_bytes: int = MAX_LINE_BYTES,
        commit_on_emit: bool = True,
        mountinfo_path: Path = MOUNTINFO_PATH,
    ) -> None:
        self._sink = sink
        self._offsets: OffsetStore = offsets if offsets is not None else MemoryOffsetStore()
        self._max_line = max_line_bytes
        self._commit_on_emit = commit_on_emit
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._watched: frozenset[str] = frozenset()  # replaced whole: observer threads read it
        handler = _WakeHandler(self._requests, lambda: self._watched)
        self._dirs = _DirWatches(handler, WatchMode(mode), poll_interval_s, mountinfo_path)
        self._tails: dict[str, FileTail] = {}
        self._worker = threading.Thread(target=self._run, name="autoexp-log-tail", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LogTailer:
        self._worker.start()
        return self

    def close(self) -> None:
        """Stop the worker and every observer, and join their threads. Idempotent."""
        if self._worker.is_alive():
            self._requests.put(_Request("stop"))
            self._worker.join(STOP_JOIN_TIMEOUT_S)
        self._dirs.close()

    def __enter__(self) -> LogTailer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests (any thread) ------------------------------------------------------------------

    def watch(self, path: str | Path) -> None:
        """Tail `path` from its saved offset (or byte 0); it need not exist yet."""
        self._requests.put(_Request("watch", os.path.abspath(path)))

    def unwatch(self, path: str | Path, *, flush: bool = True) -> None:
        """Stop tailing `path`, after reading it to the end (and flushing its last line)."""
        self._requests.put(_Request("unwatch", os.path.abspath(path), flush=flush))

    def flush(self, path: str | Path) -> None:
        """Read `path` to the end and emit its incomplete last line (at job end)."""
        self._requests.put(_Request("flush", os.path.abspath(path)))

    def rescan(self) -> None:
        """Read every watched file and retry directories that did not exist (safety poll)."""
        self._requests.put(_Request("rescan"))

    def sync(self, timeout_s: float) -> bool:
        """Wait until every request queued before this call is handled; False on timeout."""
        done = threading.Event()
        self._requests.put(_Request("sync", done=done))
        return done.wait(timeout_s)

    def commit(self, event: LogLines) -> None:
        """Save the event's end offset: a restarted tailer resumes after these lines."""
        self._offsets.save_offset(event.path, event.inode, event.end_offset)

    def watched(self) -> frozenset[str]:
        return self._watched

    def watch_mode(self, directory: str | Path) -> WatchMode | None:
        """How a directory is being watched (None until scheduled)."""
        return self._dirs.modes.get(os.path.abspath(directory))

    # -- the worker -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._requests.get()]
            while True:
                try:
                    batch.append(self._requests.get_nowait())
                except queue.Empty:
                    break
            if not self._handle_batch(batch):
                return

    def _handle_batch(self, batch: list[_Request]) -> bool:
        """Handle requests in order; a path is read once however many changes were queued."""
        read: set[str] = set()
        for req in batch:
            if req.kind == "stop":
                return False
            if req.kind == "changed" and req.path in read:
                continue
            if req.kind == "changed":
                read.add(req.path)
            else:  # a watch/unwatch/flush in between may change what reading means
                read.clear()
            try:
                self._handle(req)
            except Exception:  # one unreadable file must not stop the tailing of others
                log.exception("log tailer: %s %s failed", req.kind, req.path)
        return True

    def _handle(self, req: _Request) -> None:
        if req.kind == "changed":
            self._read(req.path)
        elif req.kind == "watch":
            self._on_watch(req.path)
        elif req.kind == "unwatch":
            self._on_unwatch(req.path, req.flush)
        elif req.kind == "flush":
            self._read_and_flush(req.path)
        elif req.kind == "rescan":
            self._on_rescan()
        elif req.kind == "sync" and req.done is not None:
            req.done.set()

    def _read(self, path: str) -> None:
        tail = self._tails.get(path)
        if tail is None:
            return
        events, more = tail.read_new()
        self._emit(events)
        if more:  # let other files have a turn; continue this one afterwards
            self._requests.put(_Request("changed", path))

    def _read_and_flush(self, path: str) -> None:
        tail = self._tails.get(path)
        if tail is None:
            return
        more = True
        while more:
            events, more = tail.read_new()
            self._emit(events)
        self._emit(tail.flush())

    def _on_watch(self, path: str) -> None:
        if path in self._tails:
            return
        self._tails[path] = FileTail(path, self._offsets.load_offset(path), max_line_bytes=self._max_line)
        self._watched = frozenset(self._tails)
        # Schedule before reading: a write landing in between still wakes us.
        self._dirs.ensure(os.path.dirname(path))
        self._read(path)

    def _on_unwatch(self, path: str, flush: bool) -> None:
        if path not in self._tails:
            return
        if flush:
            self._read_and_flush(path)
        del self._tails[path]
        self._watched = frozenset(self._tails)
        directory = os.path.dirname(path)
        if not any(os.path.dirname(p) == directory for p in self._tails):
            self._dirs.drop(directory)

    def _on_rescan(self) -> None:
        for path in list(self._tails):
            self._dirs.ensure(os.path.dirname(path))
            self._read(path)

    def _emit(self, events: list[LogEvent]) -> None:
        for event in events:
            try:
                self._sink(event)
            except Exception:
                log.exception(
                    "log tailer: the sink failed on %r; its offset is not saved", type(event).__name__
                )
                continue
            if self._commit_on_emit and isinstance(event, LogLines):
                self.commit(event)
