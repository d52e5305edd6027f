"""Allocation strategies: shapes, --test-only parsing, ranking, segments, the fan-out pick (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oellm_autoexp.config.models import SlurmConfig, walltime_minutes
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_parse import parse_job_gpu_types
from oellm_autoexp.plan.fanout_pick import pick
from oellm_autoexp.plan.segments import MIN_SAVE_BUFFER_S, elapsed_s, segment_signal
from oellm_autoexp.plan.strategies import (
    Candidate,
    Estimate,
    GpuType,
    Strategy,
    best_per_strategy,
    derive_strategies,
    gpu_type_warning,
    node_shapes,
    parse_test_only,
    rank,
    with_segments,
)
from oellm_autoexp.plan.strategy_plan import job_strategies, submission_args, variants

NOW = datetime(2026, 11, 23, 11, 27, 26, tzinfo=UTC)
# Literal `sbatch --test-only` answers of the localhost Slurm 22.05 cluster (stderr).
STARTS_NOW = (
    "sbatch: Job 3 to start at 2026-11-23T11:27:26 using 1 processors on nodes node2 in partition h100\n"
)
STARTS_LATER = (
    "sbatch: Job 2 to start at 2026-11-23T11:37:24 using 1 processors on nodes node1 in partition a100\n"
)
REFUSED = "allocation failure: Requested node configuration is not available\n"
# `scontrol show job -d 17` (excerpt) of a job on a partition whose nodes hold h100s.
SCONTROL = """\
   TRES=cpu=1,mem=100M,node=1,billing=1
   JOB_GRES=gpu:h100:1
     Nodes=node3 CPU_IDs=0 Mem=100 GRES=gpu:h100:1(IDX:0)
   TresPerNode=gres:gpu:1
"""


def strategy(name: str, **kw: object) -> Strategy:
    fields: dict[str, object] = {"partition": name, "gpu_type": "a100", "nodes": 1, "gpus_per_node": 2,
                                 "time_min": 60}  # fmt: skip
    return Strategy(name, **{**fields, **kw})  # type: ignore[arg-type]


def at(minutes: float | None) -> Estimate:
    return Estimate(None if minutes is None else NOW + timedelta(minutes=minutes))


@pytest.mark.parametrize(
    ("total", "per_node", "shapes"),
    [(4, 4, [(1, 4), (2, 2), (4, 1)]), (4, 2, [(2, 2), (4, 1)]), (8, 4, [(2, 4), (4, 2), (8, 1)]),
     (3, 2, [(3, 1)]), (0, 4, []), (4, 0, [])],
)  # fmt: skip
def test_node_shapes_never_exceed_the_gpus_a_node_has(
    total: int, per_node: int, shapes: list[tuple[int, int]]
) -> None:
    """Every shape has the job's total and at most the type's GPUs per node."""
    assert node_shapes(total, per_node) == shapes


def test_derived_strategies_skip_shapes_a_type_cannot_hold() -> None:
    """A 4-GPU job on a 2-GPU-per-node type is only ever offered as 2x2 or 4x1, on each of its partitions."""
    types = [GpuType("a100", 4, 1.0, ("a100", "a100_long")), GpuType("v100", 2, 0.5, ("v100",))]
    found = derive_strategies(types, 4, 60)
    assert [(s.partition, s.nodes, s.gpus_per_node) for s in found if s.gpu_type == "v100"] == [
        ("v100", 2, 2), ("v100", 4, 1)
    ]  # fmt: skip
    assert {s.partition for s in found if s.gpu_type == "a100"} == {"a100", "a100_long"}
    assert all(s.gpus_per_node <= {"a100": 4, "v100": 2}[s.gpu_type or ""] for s in found)


def test_test_only_answers_are_parsed_and_refusals_are_unknown() -> None:
    """The start, partition and nodes are read from sbatch's line; a refusal has no start and says why."""
    parsed = parse_test_only(STARTS_NOW, tz=UTC)
    assert (parsed.start, parsed.partition, parsed.nodes) == (NOW, "h100", "node2")
    none = parse_test_only(REFUSED)
    assert none.start is None and "not available" in none.note
    assert none.describe(NOW).startswith("unknown")
    assert parse_test_only("").describe(NOW) == "unknown (no answer)"


def test_unknown_is_shown_as_unknown_not_a_pessimistic_guess() -> None:
    """No estimate reads "unknown", never a made-up worst case such as ~1440m."""
    assert Estimate(None).describe(NOW) == "unknown"
    assert at(10).describe(NOW) == "in 10 min" and at(0).describe(NOW) == "now"


def test_a_start_later_in_the_same_second_is_now() -> None:
    """--test-only names the start to the second: asked at 12:00:00.4 about a start at 12:00:01 (a
    free partition), the wait reads "now", not "in 0 s" (seen in CI); a wait of 1 s or more is shown."""
    start = Estimate(NOW + timedelta(seconds=1))
    assert start.describe(NOW + timedelta(seconds=0.4)) == "now"
    assert start.describe(NOW) == "in 1 s"


def test_rank_by_start_then_cost_then_preference_unknown_last() -> None:
    """Earliest start first; at the same start the cheaper; then the user's order; unknown after all."""
    cands = [
        Candidate(strategy("late", preference=0), at(30)),
        Candidate(strategy("unknown", preference=1), at(None)),
        Candidate(strategy("dear", preference=2, cost_per_gpu_hour=3.0), at(0)),
        Candidate(strategy("cheap_second", preference=4), at(0)),
        Candidate(strategy("cheap_first", preference=3), at(0)),
        Candidate(strategy("refused", preference=0), Estimate(None, refused=True)),
    ]
    order = [c.strategy.name for c in rank(cands)]
    assert order == ["cheap_first", "cheap_second", "dear", "late", "unknown", "refused"]


def test_a_segmented_variant_of_the_same_cost_is_not_pruned_by_its_direct_strategy() -> None:
    """Same GPU-hours, earlier start: the checkpointed segments win over the direct run (seed pitfall)."""
    direct = strategy("a100")
    segmented = with_segments(direct, [2, 90])
    assert [s.segment_min for s in segmented] == [2]  # 90 min is not shorter than the 60 min run
    assert segmented[0].cost() == direct.cost()
    ranked = best_per_strategy(rank([Candidate(direct, at(70)), Candidate(segmented[0], at(0))]))
    assert [c.strategy.label for c in ranked] == ["a100/seg2m"]


def test_at_the_same_start_the_direct_run_is_kept() -> None:
    """A segment that starts no earlier gains nothing: the direct strategy stays."""
    direct = strategy("a100")
    ranked = best_per_strategy(
        rank([Candidate(with_segments(direct, [2])[0], at(0)), Candidate(direct, at(0))])
    )
    assert [c.strategy.label for c in ranked] == ["a100"]


@pytest.mark.parametrize(
    ("walltime_min", "buffer_s", "before_s", "warned"),
    [(10, 300, 300, False), (2, 30, MIN_SAVE_BUFFER_S, True), (2, 60, 60, False)],
)
def test_segment_signal_buffer_is_floored_with_a_warning(walltime_min: int, buffer_s: int, before_s: int,
                                                        warned: bool) -> None:  # fmt: skip
    """A buffer under 60 s is raised to 60 s and says so."""
    timing = segment_signal(walltime_min, buffer_s)
    assert timing.seconds_before == before_s and (timing.warning is not None) == warned


@pytest.mark.parametrize(("walltime_min", "buffer_s"), [(1, 300), (1, 10), (5, 300)])
def test_a_segment_shorter_than_its_buffer_is_refused_never_a_negative_timeout(walltime_min: int,
                                                                               buffer_s: int) -> None:  # fmt: skip
    """A walltime that leaves no time before the warning is an error, not a negative signal time."""
    with pytest.raises(ValueError, match="segments of at least"):
        segment_signal(walltime_min, buffer_s)


def test_elapsed_adds_every_segment_and_the_running_one_up_to_now() -> None:
    """Cumulative elapsed time: ended segments in full, the running one so far, unstarted ones nothing."""
    spans = [(NOW, NOW + timedelta(seconds=90)), (NOW + timedelta(seconds=100), None), (None, None)]
    assert elapsed_s(spans, NOW + timedelta(seconds=130)) == 120.0


def test_fanout_first_running_wins_and_the_others_are_cancelled() -> None:
    """One runs: it wins and every other candidate is cancelled in the same poll."""
    result = pick(["1", "2", "3"], {"1": JobState.PENDING, "2": JobState.RUNNING, "3": JobState.PENDING})
    assert (result.winner, result.cancel) == ("2", ("1", "3"))


def test_fanout_two_running_in_one_poll_keep_the_best_ranked_one() -> None:
    """Never two running for one attempt: the better-ranked keeps running, the other is cancelled at once."""
    result = pick(["1", "2", "3"], {"1": JobState.PENDING, "2": JobState.RUNNING, "3": JobState.RUNNING})
    assert (result.winner, result.cancel) == ("2", ("1", "3"))


def test_fanout_no_winner_while_all_wait_and_cancelled_ones_drop_out() -> None:
    """Nothing runs yet: nobody wins, nothing is cancelled; a candidate cancelled by someone else is out."""
    result = pick(["1", "2"], {"1": JobState.CANCELLED})
    assert (result.winner, result.cancel, result.out) == (None, (), ("1",))


def test_fanout_a_candidate_that_ran_and_ended_between_polls_wins() -> None:
    """Started and failed between two polls (only sacct knows): it ran, so its end is the attempt's."""
    result = pick(["1", "2"], {"1": JobState.PENDING, "2": JobState.FAILED})
    assert (result.winner, result.cancel) == ("2", ("1",))


def test_allocated_gpu_type_is_read_and_a_mismatch_warns() -> None:
    """`scontrol show job -d` names the type handed out; another type than asked for is a warning."""
    assert parse_job_gpu_types(SCONTROL) == ("h100",)
    assert parse_job_gpu_types("JOB_GRES=gpu:2\n") == ()
    spill = strategy("spill", type_in_request=False)
    assert "allocated h100" in (gpu_type_warning(spill, ("h100",)) or "")
    assert gpu_type_warning(spill, ("a100",)) is None and gpu_type_warning(spill, ()) is None


@pytest.mark.parametrize(
    ("value", "minutes"),
    [(30, 30), ("30", 30), ("00:30:00", 30), ("1-00:00:00", 1440), ("2-3", 3060), ("1:30", 2), ("x", None),
     (True, None), (0, None)],
)  # fmt: skip
def test_walltime_minutes_reads_slurm_time_forms(value: object, minutes: int | None) -> None:
    """Every --time form Slurm accepts, rounded up to whole minutes; anything else is None."""
    assert walltime_minutes(value) == minutes


def test_config_strategies_become_sbatch_args_with_segment_signal() -> None:
    """Listed strategies fill unset fields from the slurm section; a segment gets its walltime signal."""
    slurm = SlurmConfig(
        gpus_per_node=2, sbatch={"time": "01:00:00"}, signal={"enabled": True},
        strategies=[{"partition": "a100", "gpu_type": "a100"}, {"name": "spill", "partition": "p",
                    "gpu_type": "a100", "type_in_request": False, "nodes": 2, "gpus_per_node": 1}],
        allocation={"segment_minutes": [5], "save_buffer_s": 120},
    )  # fmt: skip
    found = variants(slurm, job_strategies(slurm))
    assert [s.label for s in found] == ["s1", "s1/seg5m", "spill", "spill/seg5m"]
    assert found[2].sbatch_args() == ["--nodes=2", "--time=60", "--gres=gpu:1", "--partition=p"]
    args, warning = submission_args(slurm, found[1])
    assert args[-1] == "--signal=B:USR1@120" and "--time=5" in args and "--gres=gpu:a100:2" in args
    assert warning is None


@pytest.mark.parametrize(
    ("slurm", "message"),
    [
        ({"gpus_per_node": 2, "sbatch": {"time": 60}, "strategies": [{"gpus_per_node": 4}]}, "every strategy asks"),
        ({"gpus_per_node": 4, "sbatch": {"time": 60}, "gpu_types": {"v100": {"gpus_per_node": 2}},
          "strategies": [{"gpu_type": "v100"}]}, "a v100 node has 2"),
        ({"gpus_per_node": 1, "strategies": [{}]}, "need the run's walltime"),
        ({"gpus_per_node": 1, "sbatch": {"time": 60}, "strategies": [{}],
          "allocation": {"segment_minutes": [5]}}, "signal.enabled"),
        ({"gpus_per_node": 1, "sbatch": {"time": 60}, "allocation": {"derive": True}}, "needs slurm.gpu_types"),
    ],
)  # fmt: skip
def test_bad_strategy_config_says_which_key_and_what_is_expected(
    slurm: dict[str, object], message: str
) -> None:
    """Impossible shapes, a missing walltime, segments without the signal: one clear message each."""
    with pytest.raises(ValueError, match=message):
        SlurmConfig.model_validate(slurm)


MULTI_LINE = (
    "sbatch: warning: can't honor --ntasks-per-node set to 4 which doesn't match the requested tasks 8\n"
    "sbatch: Warning: Job script has no #SBATCH lines\n"
    "sbatch: error: Batch job submission failed: Requested node configuration is not available\n\n"
)


def test_a_multi_line_answer_is_one_line_note() -> None:
    """Whatever sbatch --test-only prints before its reason (warnings, a blank line), the note is the
    reason alone, on one line: `plan --strategies` keeps one table row per strategy."""
    note = parse_test_only(MULTI_LINE).note
    assert note == "Requested node configuration is not available"
    assert "\n" not in parse_test_only("first line\nsecond\tline with   spaces\n").note
    assert parse_test_only("\n\n").note == "no answer"


def test_a_table_cell_with_line_breaks_stays_on_its_row() -> None:
    """render_table: one line per row even when a value spans lines."""
    from oellm_autoexp.cli._views import render_table

    text = render_table(
        [{"rank": 1, "start": "unknown (a\nb)"}, {"rank": 2, "start": "now"}], ("rank", "start")
    )
    assert len(text.splitlines()) == 3
