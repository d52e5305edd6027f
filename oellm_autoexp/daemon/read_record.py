"""The timing record: when the monitor read which bytes of which log (`autoexp replay --session`).

core/replay/read_times.py says how reads coalesce; this keeps them per live attempt and saves
every log's reads since the last save in one transaction (each poll, and at once for a read
that carried a cause line), together with where each log was consumed to.
"""

from __future__ import annotations

from dataclasses import replace

from oellm_autoexp.adapters.logs.tail import LogLines
from oellm_autoexp.adapters.store.buffer import is_disk_full
from oellm_autoexp.adapters.store.sqlite_store import LogReadWrite, SQLiteStore
from oellm_autoexp.core.replay.read_times import ReadMark, coalesces, extended
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.watch import LiveAttempt


class ReadRecord:
    """The reads not yet saved, by attempt; `note` one, `save` them all."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._unsaved: dict[int, LiveAttempt] = {}  # attempt id -> live attempt with reads to save

    def save(self) -> None:
        """The timing-record rows and consumed offsets of every log read since the last save, at once."""
        lives = [live for live in self._unsaved.values() if live.unsaved_reads and live.log_path]
        writes = [
            LogReadWrite(live.attempt.id, mark.row_id, mark.start_offset, mark.end_offset, utc(mark.read_at_s),
                         consumed=(path, live.read_inode) if mark is live.unsaved_reads[-1] else None)
            for live in lives if (path := live.log_path) for mark in live.unsaved_reads
        ]  # fmt: skip
        if not writes:
            self._unsaved.clear()
            return
        try:
            ids = self.store.save_log_reads(writes)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            return  # kept, and saved at a later poll (the write buffer says the disk is full)
        newest = iter(ids)
        for live in lives:
            row_ids = [next(newest) for _ in live.unsaved_reads]
            if live.last_read is live.unsaved_reads[-1]:
                live.last_read = replace(live.last_read, row_id=row_ids[-1])
            live.unsaved_reads = []
        self._unsaved.clear()

    def note(self, live: LiveAttempt, event: LogLines, now: float, *, has_signal: bool) -> None:
        """Remember when these bytes were read, so that a replay delivers them at the same time.

        Kept in memory and saved with every other log's reads at the next poll (`save`):
        one transaction per poll, not a commit per read. A read that carried a cause line is
        saved at once, beside its signals. A monitor killed in between loses at most a poll's
        plain reads: its successor reads those lines again from the saved offset.
        """
        last = live.last_read
        if last is not None and coalesces(last, event.start_offset, now, has_signal):
            mark = extended(last, event.end_offset)
            if live.unsaved_reads and live.unsaved_reads[-1] is last:
                live.unsaved_reads[-1] = mark
            else:
                live.unsaved_reads.append(mark)
        else:
            mark = ReadMark(None, event.start_offset, event.end_offset, now, has_signal)
            live.unsaved_reads.append(mark)
        live.last_read, live.read_inode = mark, event.inode
        self._unsaved[live.attempt.id] = live
        if has_signal:
            self.save()
