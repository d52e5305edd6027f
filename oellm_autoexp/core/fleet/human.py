"""When a human acts: a page answered by day, at night or at the weekend; a look twice a day. No I/O.

The simulated clock starts on a Monday at 00:00; `t` is seconds since then.
"""

from __future__ import annotations

import math

from oellm_autoexp.core.fleet.settings import DAY_S, HOUR_S, Human


def is_weekend(t: float) -> bool:
    return int(t // DAY_S) % 7 >= 5


def is_day(t: float, human: Human) -> bool:
    hour = (t % DAY_S) / HOUR_S
    return not is_weekend(t) and human.day_start_h <= hour < human.day_end_h


def _period_response_s(t: float, human: Human) -> float:
    """The response time of the period `t` falls in (day, night, weekend)."""
    if is_weekend(t):
        return human.weekend_response_min * 60.0
    if is_day(t, human):
        return human.day_response_min * 60.0
    return human.night_response_min * 60.0


def response_s(t: float, human: Human) -> float:
    """How long a page sent at `t` waits for its answer.

    A page is answered by whoever gets to it first: the response of the period it was sent in, or
    of a later period that starts meanwhile (a page at 07:55 is seen by the day shift at 08:00, not
    four hours later). So a later page is never answered earlier than an earlier one, which keeps
    a policy that pages sooner (the oracle) from ever waiting longer for the same human.
    """
    best = t + _period_response_s(t, human)
    day = math.floor(t / DAY_S)
    for d in range(day, day + 2 + int(best // DAY_S - day)):
        for hour in (0.0, human.day_start_h, human.day_end_h):
            start = d * DAY_S + hour * HOUR_S
            if t < start < best:
                best = min(best, start + _period_response_s(start, human))
    return best - t


def next_check(t: float, human: Human) -> float:
    """The first time at or after `t` that a human looks in (no supervisor: twice a day)."""
    hours = sorted(h % 24 for h in human.checks_h) or [8.0]
    day = math.floor(t / DAY_S)
    for d in (day, day + 1):
        for h in hours:
            at = d * DAY_S + h * HOUR_S
            if at >= t:
                return at
    return (day + 2) * DAY_S + hours[0] * HOUR_S
