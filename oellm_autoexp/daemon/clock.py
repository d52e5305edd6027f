"""The monitor keeps time as float epoch seconds (what the pure core takes); the store wants
aware UTC datetimes."""

from __future__ import annotations

from datetime import UTC, datetime


def utc(now_s: float) -> datetime:
    return datetime.fromtimestamp(now_s, UTC)
