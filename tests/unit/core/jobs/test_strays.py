"""The stray net's pure part: which tagged live jobs are not the attempt the store tracks."""

from __future__ import annotations

from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_parse import parse_squeue_tagged
from oellm_autoexp.core.jobs.strays import (
    KnownAttempt,
    TaggedJob,
    attempt_tag,
    find_strays,
    parse_tag,
    tag_generation,
)

TAG1 = "autoexp-1-7-1-0000abcd"
TAG2 = "autoexp-1-7-2-1111abcd"


def attempt(no: int, tag: str, executor_id: str | None, intent: str, ended: bool = False) -> KnownAttempt:
    return KnownAttempt(100 + no, 7, no, tag, executor_id, intent, ended)


def test_tag_is_parsed_and_other_comments_are_not_tags() -> None:
    """A submit tag names session, job and attempt; a user's own comment is no tag."""
    assert parse_tag(TAG2) == (1, 7, 2)
    assert parse_tag("my run, please keep") is None
    assert parse_tag("autoexp-1-7-2-NOTHEX!!") is None


def test_the_submitting_monitors_generation_travels_in_the_tag() -> None:
    """`-g<N>` names the lock generation of the monitor that submitted the job (its fencing token):
    the tag still parses to its session, job and attempt, a fan-out candidate's `-c<N>` is still
    the same attempt, and tags from before the generation existed still parse (generation None)."""
    tagged = "autoexp-3-7-2-1a2b3c4d-g5"
    assert parse_tag(tagged) == (3, 7, 2) and tag_generation(tagged) == 5
    assert attempt_tag(tagged + "-c1") == tagged and tag_generation(tagged + "-c1") == 5
    assert tag_generation("autoexp-3-7-2-1a2b3c4d") is None
    assert tag_generation("my run") is None


def test_tracked_attempt_and_unconfirmed_intent_are_not_strays() -> None:
    """The job the store tracks, and a job whose intent is still being resolved (it is adopted by
    its tag), are left alone."""
    tagged = [TaggedJob("10", TAG1, JobState.RUNNING), TaggedJob("11", TAG2, JobState.PENDING)]
    known = [attempt(1, TAG1, "10", "confirmed"), attempt(2, TAG2, None, "intended")]
    assert find_strays(tagged, known, {1}) == []


def test_job_of_an_abandoned_intent_is_a_stray_with_its_attempt() -> None:
    """An orphaned sbatch's job (its attempt was abandoned) is cancelled, naming the attempt."""
    tagged = [
        TaggedJob("11", TAG2, JobState.RUNNING),
        TaggedJob("12", "autoexp-1-7-3-2222abcd", JobState.RUNNING),
    ]
    known = [
        attempt(2, TAG2, None, "abandoned", ended=True),
        attempt(3, "autoexp-1-7-3-2222abcd", "12", "confirmed"),
    ]
    [stray] = find_strays(tagged, known, {1})
    assert (stray.executor_id, stray.job_id, stray.attempt_id) == ("11", 7, 102)
    assert "attempt 2 was given up" in stray.reason and "orphaned sbatch" in stray.reason


def test_second_job_with_a_tracked_tag_is_a_stray() -> None:
    """A second job submitted with a tracked attempt's tag (by hand) is a stray; the tracked one is not."""
    tagged = [TaggedJob("10", TAG1, JobState.RUNNING), TaggedJob("20", TAG1, JobState.PENDING)]
    [stray] = find_strays(tagged, [attempt(1, TAG1, "10", "confirmed")], {1})
    assert stray.executor_id == "20"
    assert "attempt 1 is job 10; this one is a second submission" in stray.reason


def test_ended_attempt_is_a_stray_unknown_tags_other_sessions_and_ended_jobs_are_not() -> None:
    """A live job whose attempt is recorded ended is a stray. A tag this store never recorded (another
    state dir's session 1), jobs of sessions not monitored, and jobs that already ended are not touched."""
    tagged = [
        TaggedJob("30", "autoexp-1-9-1-3333abcd", JobState.RUNNING),  # no such attempt
        TaggedJob("10", TAG1, JobState.RUNNING),  # recorded ended (lost), running again
        TaggedJob("40", "autoexp-2-5-1-4444abcd", JobState.RUNNING),  # session 2: not ours
        TaggedJob("50", "autoexp-1-9-2-5555abcd", JobState.COMPLETED),  # already over
    ]
    strays = find_strays(tagged, [attempt(1, TAG1, "10", "confirmed", ended=True)], {1})
    assert [(s.executor_id, s.job_id, s.attempt_id) for s in strays] == [("10", 7, 101)]
    assert "recorded as ended" in strays[0].reason


def test_squeue_with_comments_gives_records_and_tags() -> None:
    """`squeue -o %i|%T|%r|%N|%k` lines give each job's record and, where set, its comment."""
    text = f"10|RUNNING|None|node1|{TAG1}\n11|PENDING|Priority||(null)\n12_3|RUNNING|None|node[1-2]|note\n"
    records, comments = parse_squeue_tagged(text)
    assert records["10"].state is JobState.RUNNING and records["12_3"].nodes == ("node1", "node2")
    assert records["11"].state is JobState.PENDING
    assert comments == {"10": TAG1, "12_3": "note"}


def test_fan_out_candidates_belong_to_their_attempt() -> None:
    """Candidates (`-cN`) of a race still open are left alone; a loser still alive once another
    candidate won, or once the attempt was given up, is a stray."""
    assert parse_tag(f"{TAG2}-c3") == (1, 7, 2)
    racing = [
        TaggedJob("41", f"{TAG2}-c1", JobState.PENDING),
        TaggedJob("42", f"{TAG2}-c2", JobState.RUNNING),
    ]
    assert find_strays(racing, [attempt(2, TAG2, None, "intended")], {1}) == []
    [loser] = find_strays(racing, [attempt(2, TAG2, "42", "confirmed")], {1})
    assert loser.executor_id == "41" and "second submission" in loser.reason
    given_up = find_strays(racing, [attempt(2, TAG2, None, "abandoned", ended=True)], {1})
    assert {s.executor_id for s in given_up} == {"41", "42"}
