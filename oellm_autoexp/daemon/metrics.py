"""The monitor's Prometheus metrics: an observer (daemon/events.py) that keeps them current.

Numbers come from where they are decided: judgements (restarts by cause, decisions, the
decision latency from the first fatal line), each poll (jobs by status and attempts by
state from the store; last iteration, seconds since progress and log bytes classified from
the attempts being watched) and every Slurm command (adapters/executors/command_timing.py). After
each poll the textfile, if asked for, is rewritten atomically; the HTTP endpoint serves the
registry whenever it is scraped. Metric names and meanings: docs/operations.md.

prometheus-client is an optional dependency: this module is imported only when metrics
were asked for (cli/_metrics.py says how to install it otherwise).
"""

from __future__ import annotations

from collections import Counter as Tally
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from oellm_autoexp.adapters.alerts.metrics_export import MetricsEndpoint, write_textfile
from oellm_autoexp.adapters.executors import command_timing
from oellm_autoexp.adapters.executors.command_timing import CommandRun
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.daemon.events import Judged, MonitorEvent, Polled
from oellm_autoexp.daemon.watch import LiveAttempt

# Fatal line -> decision: the settle window is 5 s; a wait for the job's end can take minutes.
DECISION_LATENCY_BUCKETS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
# squeue/sacct answer in well under a second on a healthy controller; the timeout is 30 s.
SLURM_COMMAND_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class MonitorMetrics:
    """The metrics of one monitor, in a registry of its own (never prometheus-client's global one)."""

    def __init__(
        self,
        store: SQLiteStore | None,
        *,
        endpoint: tuple[str, int] | None = None,
        textfile: Path | None = None,
    ) -> None:
        self.store = store  # None until `autoexp run` has submitted (the port is taken first)
        self.registry = CollectorRegistry()
        self._define(self.registry)
        self.textfile = textfile
        self.endpoint = MetricsEndpoint(self.registry, *endpoint) if endpoint else None
        # Log bytes are counted from the store's timing record (log_reads): the rows this monitor
        # wrote (read since it started), per attempt watched, until one poll after it ended.
        self._since = datetime.now(UTC)
        self._watched: set[int] = set()  # attempt ids
        self._bytes_counted: dict[int, int] = {}  # attempt id -> bytes already counted
        self._closed = False
        command_timing.add_listener(self._on_command)

    def _define(self, r: CollectorRegistry) -> None:
        self.jobs = Gauge("autoexp_jobs", "Jobs of the monitored sessions, by status", ["status"], registry=r)
        self.attempts = Gauge(
            "autoexp_attempts", "Submitted attempts of the monitored sessions, by last known state", ["state"],
            registry=r,
        )  # fmt: skip
        self.restarts = Counter(
            "autoexp_restarts", "Restarts decided by this monitor, by cause", ["cause"], registry=r
        )
        self.decisions = Counter(
            "autoexp_decisions", "Decisions recorded by this monitor, by action", ["action"], registry=r
        )
        self.last_iteration = Gauge(
            "autoexp_last_iteration",
            "Highest training iteration a job's log reported",
            ["session", "job"],
            registry=r,
        )
        self.since_progress = Gauge(
            "autoexp_seconds_since_progress", "Seconds since a running job's iteration counter last advanced",
            ["session", "job"], registry=r,
        )  # fmt: skip
        self.decision_latency = Histogram(
            "autoexp_decision_latency_seconds", "From reading the first fatal line to the decision",
            buckets=DECISION_LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.slurm_seconds = Histogram(
            "autoexp_slurm_command_seconds", "Wall time of Slurm commands (sbatch, squeue, sacct, scancel...)",
            ["command"], buckets=SLURM_COMMAND_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.slurm_failures = Counter(
            "autoexp_slurm_command_failures",
            "Slurm commands that failed, by how",
            ["command", "reason"],
            registry=r,
        )
        self.log_bytes = Counter(
            "autoexp_log_bytes_classified", "Bytes of job logs read and classified", registry=r
        )
        self.last_poll = Gauge(
            "autoexp_last_poll_timestamp_seconds", "When the monitor last polled", registry=r
        )

    # -- the observer -----------------------------------------------------------------------------

    def notice(self, event: MonitorEvent) -> None:
        if isinstance(event, Judged):
            self._on_judged(event)
        elif isinstance(event, Polled):
            self._on_polled(event)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        command_timing.remove_listener(self._on_command)
        if self.textfile is not None:
            write_textfile(self.registry, self.textfile)  # the final numbers stay for the collector
        if self.endpoint is not None:
            self.endpoint.close()

    def _on_judged(self, event: Judged) -> None:
        decision, evidence = event.judgement.decision, event.judgement.evidence
        self.decisions.labels(decision.action.value).inc()
        if decision.action is DecisionAction.RESTART:
            self.restarts.labels(evidence.error_type or evidence.kind).inc()
        if evidence.after_first_fatal_s is not None:
            self.decision_latency.observe(evidence.after_first_fatal_s)
        self._watched.add(event.live.attempt.id)

    def _on_polled(self, event: Polled) -> None:
        self._store_counts(event.session_ids)
        self.since_progress.clear()
        for live in event.lives:
            self._watch_numbers(live, event.now_s)
        self._count_log_bytes({live.attempt.id for live in event.lives})
        self.last_poll.set(event.now_s)
        if self.textfile is not None:
            write_textfile(self.registry, self.textfile)

    def _store_counts(self, session_ids: tuple[int, ...]) -> None:
        if self.store is None:
            return
        jobs: Tally[str] = Tally()
        states: Tally[str] = Tally()
        self.last_iteration.clear()
        for sid in session_ids:
            names = {}
            for job in self.store.jobs_for_session(sid):
                jobs[job.status] += 1
                names[job.id] = job.name
            best: dict[int, int] = {}
            for attempt in self.store.attempts_for_session(sid):
                if attempt.executor_job_id:
                    states[attempt.state.value] += 1
                if attempt.last_iteration is not None:
                    best[attempt.job_id] = max(best.get(attempt.job_id, 0), attempt.last_iteration)
            for job_id, iteration in best.items():
                self.last_iteration.labels(str(sid), names.get(job_id, str(job_id))).set(iteration)
        _set_all(self.jobs, jobs)
        _set_all(self.attempts, states)

    def _watch_numbers(self, live: LiveAttempt, now_s: float) -> None:
        job, view = live.runtime.job, live.view
        labels = (str(job.session_id), job.name)
        if view.last_iteration is not None:
            self.last_iteration.labels(*labels).set(view.last_iteration)
        tracker = view.tracker
        if tracker is not None:
            since = tracker.progress_s if tracker.progress_s is not None else tracker.started_s
            self.since_progress.labels(*labels).set(max(now_s - since, 0.0))

    def _count_log_bytes(self, live_ids: set[int]) -> None:
        """Add what was read of each watched attempt's log since the last poll (its end included)."""
        if self.store is None:
            return
        for attempt_id in self._watched | live_ids:
            reads = self.store.log_reads_for_attempt(attempt_id)
            total = sum(r.end_offset - r.start_offset for r in reads if r.read_at >= self._since)
            counted = self._bytes_counted.get(attempt_id, 0)
            if total > counted:
                self.log_bytes.inc(total - counted)
                self._bytes_counted[attempt_id] = total
        # An attempt no longer watched was counted once more above (its last lines): forget it.
        self._watched = set(live_ids)

    def _on_command(self, run: CommandRun) -> None:
        self.slurm_seconds.labels(run.command).observe(run.seconds)
        if run.failure is not None:
            self.slurm_failures.labels(run.command, run.failure.value).inc()


def _set_all(gauge: Gauge, counts: Tally[str]) -> None:
    gauge.clear()
    for label, count in counts.items():
        gauge.labels(label).set(count)
