"""The word model a failed attempt no pattern explains is guessed from (core/classify/vocabulary.py)."""

from __future__ import annotations

import json
import math

import pytest

from oellm_autoexp.core.classify.vocabulary import (
    HEALTHY,
    MAX_CANDIDATES,
    Guess,
    WordModel,
    guess_cause,
    telling,
    train,
    words,
)

# A small model whose classes have words of their own, so every figure below follows from the
# documents alone (the shipped model is checked in test_guess.py and tests/unit/tools).
MODEL = train(
    [
        ("oom", "cannot allocate memory\nout of memory while allocating a buffer\nshm allocation too small"),
        ("nccl", "ibv queue pair failed\nnccl socket connection reset by peer\ninfiniband link down"),
        ("config_error", "invalid argument expected an integer\nunrecognized option given"),
        (HEALTHY, "deprecated option will be removed\nretrying the connection after a failed attempt"),
    ],
    alpha=0.1,
)

# -- words ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # CamelCase and snake_case split; `of` is a stop word, `torch.` a word of its own
        ("torch.OutOfMemoryError: CUDA out of memory", ["torch", "out", "memory", "error", "cuda", "out", "memory"]),
        ("out_of_memory_error", ["out", "memory", "error"]),
        ("NCCLError in ibv_create_qp", ["nccl", "error", "ibv", "create", "qp"]),  # an acronym run stays whole
        ("HTTPServerError", ["http", "server", "error"]),
        # numbers, hex, paths and source files are no words; one-letter leftovers neither
        ("failed at 0x7ffe12ab in /opt/lib/libnccl.so.2 (train.py:42) after 3600 s", ["failed", "after"]),
        # launcher and rank prefixes are stripped before the words are read
        ("[rank3]: gpu007: RuntimeError: boom", ["runtime", "error", "boom"]),
        ("[default1]:3: boom", ["boom"]),
        # stop words go
        ("The job is in a bad state and it was on the node", ["job", "bad", "state", "node"]),
        ("a an the of 12 34", []),
    ],
)  # fmt: skip
def test_words(line: str, expected: list[str]) -> None:
    """Lower-case words, split at case and underscore changes; variable parts, prefixes and stop words dropped."""
    assert words(line) == expected


# -- the model --------------------------------------------------------------------------------------


def test_posterior_ranks_the_class_whose_words_appear() -> None:
    """Each class wins on its own words; probabilities sum to one and come most likely first."""
    for line, expected in [
        ("ERROR: cannot allocate shm buffer", "oom"),
        ("ERROR: ibv queue pair reset", "nccl"),
        ("ERROR: invalid argument", "config_error"),
    ]:
        ranked = MODEL.posterior(words(line))
        assert ranked[0][0] == expected, (line, ranked)
        assert math.isclose(sum(p for _, p in ranked), 1.0)
        assert [p for _, p in ranked] == sorted((p for _, p in ranked), reverse=True)


def test_unseen_words_count_for_nothing() -> None:
    """Words no class has seen change no figure; a line of only such words gets no ranking at all."""
    assert MODEL.posterior(["zebra", "quux"]) == []
    assert MODEL.posterior(words("zebra quux gronk")) == []
    assert MODEL.posterior(["ibv", "queue", "zebra", "quux"]) == MODEL.posterior(["ibv", "queue"])


def test_the_prior_is_uniform() -> None:
    """A class with many more training words gets no head start: one shared word splits evenly."""
    big = train([("a", "shared\n" + "alpha beta gamma\n" * 50), ("b", "shared")], alpha=0.5)
    ranked = dict(big.posterior(["shared"]))
    # `shared` is 1 of 151 words of a, 1 of 1 of b: b wins, whatever a's size
    assert ranked["b"] > ranked["a"]


def test_json_round_trip_keeps_the_posteriors() -> None:
    """to_json -> JSON text -> from_json gives the same counts, alpha and posteriors."""
    again = WordModel.from_json(json.loads(json.dumps(MODEL.to_json())))
    assert again.alpha == MODEL.alpha and again.classes == MODEL.classes
    assert {c: dict(w) for c, w in again.counts.items()} == {c: dict(w) for c, w in MODEL.counts.items()}
    for line in ["cannot allocate memory", "ibv queue failed", "invalid option", "retrying connection"]:
        before, after = MODEL.posterior(words(line)), again.posterior(words(line))
        assert [c for c, _ in after] == [c for c, _ in before]
        # the same figures, summed in another order
        assert [p for _, p in after] == pytest.approx([p for _, p in before], rel=1e-12)


@pytest.mark.parametrize(
    "data",
    [
        {"alpha": 0, "counts": {"oom": {"memory": 1}}},
        {"alpha": -0.3, "counts": {"oom": {"memory": 1}}},
        {"alpha": "0.3", "counts": {"oom": {"memory": 1}}},
        {"alpha": None, "counts": {"oom": {"memory": 1}}},
        {"alpha": 0.3, "counts": ["oom", "memory"]},
        {"alpha": 0.3, "counts": "oom"},
        {"alpha": 0.3, "counts": {"oom": {"memory": "many"}}},
        {"alpha": float("nan"), "counts": {"oom": {"memory": 1}}},  # json reads NaN: every posterior NaN
        {"alpha": float("inf"), "counts": {"oom": {"memory": 1}}},
        {"alpha": True, "counts": {"oom": {"memory": 1}}},
        {"alpha": 0.3, "counts": {"oom": ["memory"]}},
        {"alpha": 0.3, "counts": {"oom": {"memory": -1}}},
        {"alpha": 0.3, "counts": {"oom": {"memory": 1.5}}},
        {"alpha": 0.3},
        [],
    ],
)
def test_from_json_rejects_a_bad_alpha_or_counts(data: object) -> None:
    """A non-positive or non-numeric alpha, counts that are no mapping or no numbers: ValueError."""
    with pytest.raises(ValueError):
        WordModel.from_json(data)


def test_train_counts_every_line_of_a_document() -> None:
    """Each line's words add to its class; a class with no words at all is left out."""
    model = train([("oom", "memory memory\nmemory"), ("oom", "shm"), ("empty", "12 0x3 /a/b")])
    assert model.classes == ["oom"]
    assert dict(model.counts["oom"]) == {"memory": 3, "shm": 1}


# -- telling ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "ERROR: something went wrong",
        "worker 3 failed to start",
        "[rank0]: RuntimeError: shapes do not line up",
        "KeyError: 'lr'",  # an exception's name run into its prefix (no error word of its own)
        "CudaFault",
        "CUDA out of memory",
        "process ended by signal 9",
        "loss is nan",
        "node12:3456:3478 [0] NCCL WARN Call to ibv_create_qp failed",  # NCCL's WARN is its error level
        "node12:3456:3478 [0] NCCL WARN NET/IB : Got completion from peer with error 12",
    ],
)
def test_telling_lines(line: str) -> None:
    """Error words, an exception's name, memory running out, a signal, a bad number: telling."""
    assert telling(line)


@pytest.mark.parametrize(
    "line",
    [
        "INFO: the error count is 0",
        "DEBUG failed to read the cache, recomputing",
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node1]:29500",
        "[rank0]:[W1122 04:21:03.123 ProcessGroupNCCL.cpp:1234] Warning: the error handling is deprecated",
        "/opt/torch/utils.py:12: UserWarning: this overload failed to be deprecated",
        "W1122 04:21:03.468000 1208 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process failed",
        " [2026-11-22 04:21:01] iteration        1/      12 | lm loss: 5.0E+00 | nan iterations: 0 |",
        "Training:  45%|####5     | 450/1000 [01:00<01:10, error=3]",
        "all good here",
    ],
)
def test_lines_that_are_no_cause(line: str) -> None:
    """Notices (INFO/DEBUG), torch's `[W ...cpp:N]` and glog `W1122` warnings, Python warnings, Megatron's
    iteration line and tqdm bars are never telling, whatever error words they hold; plain chatter neither."""
    assert not telling(line)


# -- guess_cause ------------------------------------------------------------------------------------


def test_a_guess_names_the_line_and_its_number() -> None:
    """The class of the telling line, its text without the newline, its number among the lines (from 1)."""
    lines = ["starting up", "loading data", "ERROR: cannot allocate shm buffer\n", "bye"]
    guess = guess_cause(lines, MODEL, min_probability=0.5)
    assert guess is not None
    assert (guess.error_type, guess.line, guess.line_no) == ("oom", "ERROR: cannot allocate shm buffer", 3)
    assert guess.probability == pytest.approx(dict(MODEL.posterior(words(lines[2])))["oom"])
    assert "oom" in guess.detail and f"p={guess.probability:.2f}" in guess.detail


def test_no_guess_under_min_probability() -> None:
    """A guess below `min_probability` is none; at or above it, it stands."""
    line = "ERROR: cannot allocate memory over ibv"  # words of oom and nccl: a split vote
    p = MODEL.posterior(words(line))[0][1]
    assert 0.5 < p < 0.999
    assert guess_cause([line], MODEL, min_probability=p + 1e-9) is None
    assert guess_cause([line], MODEL, min_probability=p) is not None


def test_no_guess_from_a_line_healthy_wins() -> None:
    """A telling line whose words read healthy guesses nothing, however low the bar."""
    line = "ERROR: deprecated option, retrying the connection"
    assert telling(line) and MODEL.posterior(words(line))[0][0] == HEALTHY
    assert guess_cause([line], MODEL, min_probability=0.0) is None


def test_no_guess_from_explained_or_untelling_lines() -> None:
    """A line a pattern matched (its number, from 1, given in `explained`) and a line that is not telling are
    never guessed from; nor is a log of lines with unknown words only."""
    line = "ERROR: cannot allocate shm buffer"
    assert guess_cause([line + "\n"], MODEL, 0.5, explained={1}) is None
    assert guess_cause(["x", line], MODEL, 0.5, explained={1}) is not None  # only line 1 is explained
    assert guess_cause(["INFO: cannot allocate shm buffer"], MODEL, 0.5) is None
    assert guess_cause(["ERROR: zebra quux"], MODEL, 0.0) is None
    assert guess_cause([], MODEL, 0.0) is None


def test_the_most_probable_line_wins() -> None:
    """Of several guessable lines the most probable decides, not the last one; a tie keeps the first."""
    weak = "ERROR: cannot allocate memory over ibv"
    strong = "ERROR: ibv queue pair failed, infiniband link down"
    later = "ERROR: cannot allocate shm buffer"
    probabilities = [MODEL.posterior(words(x))[0][1] for x in (weak, strong, later)]
    assert probabilities[1] == max(probabilities) and probabilities[2] < probabilities[1]
    guess = guess_cause(["ok", weak, strong, "ok", later, "ok"], MODEL, min_probability=0.5)
    assert guess is not None and (guess.error_type, guess.line_no) == ("nccl", 3)
    tie = guess_cause([strong, strong], MODEL, min_probability=0.5)
    assert tie is not None and tie.line_no == 1


def test_only_the_last_candidates_are_weighed() -> None:
    """A strong line followed by MAX_CANDIDATES other telling lines is past the window the guess reads."""
    strong = "ERROR: ibv queue pair failed, infiniband link down"
    others = ["ERROR: cannot allocate memory over ibv"] * MAX_CANDIDATES
    kept = guess_cause([strong, *others[1:]], MODEL, min_probability=0.5)
    assert kept is not None and kept.line_no == 1
    dropped = guess_cause([strong, *others], MODEL, min_probability=0.5)
    assert dropped is not None and dropped.line_no == 2 and dropped.probability < kept.probability


def test_guess_is_a_value() -> None:
    """Guesses compare by value (the monitor records them; a replay compares them)."""
    assert Guess("oom", "l", 1, 0.9) == Guess("oom", "l", 1, 0.9)
