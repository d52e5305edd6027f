"""The session report as one self-contained HTML page (inline CSS, JS and SVG). Pure: model in, text out.

Clusters are often offline, so the page fetches nothing: the template
(templates/report.html.j2) carries its style and its few lines of script, and
the charts are SVG laid out here, in Python, where the geometry is testable.
Every value reaches the page through Jinja2's autoescaping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache

import jinja2

from oellm_autoexp.core.report.report import JobReport, Report
from oellm_autoexp.core.template_env import template_environment

CHART_W = 960  # SVG user units; the page scales it to the window
LEFT = 70  # room for the axis labels
RIGHT = 20
LANE_Y = 24  # the attempts' bars
LANE_H = 22
CURVE_TOP = 70  # the iteration curve below the bars
CURVE_H = 150
CHART_H = CURVE_TOP + CURVE_H + 30
TICKS = 6


@dataclass(frozen=True)
class Axis:
    """Maps times and iterations of one job to SVG coordinates."""

    t0_s: float
    t1_s: float
    max_iteration: int

    def x(self, t_s: float) -> float:
        span = max(self.t1_s - self.t0_s, 1e-9)
        return round(LEFT + (t_s - self.t0_s) / span * (CHART_W - LEFT - RIGHT), 1)

    def y(self, iteration: int) -> float:
        top = max(self.max_iteration, 1)
        return round(CURVE_TOP + CURVE_H - iteration / top * CURVE_H, 1)


def render_report_html(report: Report) -> str:
    """The report page."""
    jobs = [_job_view(job) for job in report.jobs]
    return _environment().get_template("report.html.j2").render(
        report=report, jobs=jobs, generated=_clock(report.generated_s), fmt_s=format_duration,
        chart_w=CHART_W, chart_h=CHART_H, lane_y=LANE_Y, lane_h=LANE_H, curve_top=CURVE_TOP,
        curve_bottom=CURVE_TOP + CURVE_H, left=LEFT,
    )  # fmt: skip


def _job_view(job: JobReport) -> dict[str, object]:
    axis = Axis(job.t0_s, job.t1_s, max((p.iteration for p in job.curve), default=0))
    by_attempt: dict[int, list[str]] = {}
    for p in job.curve:
        by_attempt.setdefault(p.attempt_no, []).append(f"{axis.x(p.time_s)},{axis.y(p.iteration)}")
    return {
        "job": job,
        "bars": [(b, axis.x(b.start_s), max(axis.x(b.end_s) - axis.x(b.start_s), 2.0)) for b in job.bars],
        "markers": [(m, axis.x(m.time_s)) for m in job.markers],
        "lines": sorted(by_attempt.items()),
        "losses": [
            (loss, axis.x(loss.fatal_s), max(axis.x(loss.resumed_s) - axis.x(loss.fatal_s), 1.0))
            for loss in job.losses
        ],
        "time_ticks": [(axis.x(t), _offset(t - job.t0_s)) for t in _ticks(job.t0_s, job.t1_s)],
        "iteration_ticks": [(axis.y(i), i) for i in _iteration_ticks(axis.max_iteration)],
    }


def _ticks(t0: float, t1: float) -> list[float]:
    step = (t1 - t0) / (TICKS - 1)
    return [t0 + i * step for i in range(TICKS)]


def _iteration_ticks(top: int) -> list[int]:
    if top <= 0:
        return [0]
    return sorted({round(top * i / 4) for i in range(5)})


def format_duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 07 min`: what a person reads at a glance."""
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _offset(seconds: float) -> str:
    return "+" + format_duration(seconds)


def _clock(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@cache
def _environment() -> jinja2.Environment:
    return template_environment(autoescape=True, filters={"clock": _clock})
