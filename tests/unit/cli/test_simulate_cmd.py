"""`autoexp simulate`: the JSON scripts rely on, a mix from YAML, bad input as one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main

ISSUE_ARGS = ["simulate", "--mix", "llama3", "--gpus", "16384", "--days", "30", "--checkpoint-min", "30",
              "--seed", "1", "--json"]  # fmt: skip
CAUSES = {"detection_delay", "wrong_stop", "wrong_restart", "repeated_bad_node", "queue_wait", "lost_work"}


def test_the_issue_command_prints_ettr_and_losses_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's interface: policies autoexp/upstream/none/oracle, each an ETTR fraction and losses by cause."""
    assert main(ISSUE_ARGS) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"autoexp", "upstream", "none", "oracle", "oracle_paged"}
    for policy in out["policies"].values():
        assert 0.0 <= policy["ettr"] <= 1.0
        assert set(policy["lost_gpu_hours"]) >= CAUSES
        assert all(isinstance(v, float) for v in policy["lost_gpu_hours"].values())
        assert isinstance(policy["restarts"], int) and isinstance(policy["human_interventions"], int)
    assert out["settings"]["gpus"] == 16384 and out["settings"]["checkpoint_min"] == 30
    assert out["mix"]["name"] == "llama3" and out["faults"] > 0


def test_a_mix_from_a_yaml_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--mix FILE: the user's own families (shipped ones by name, with their lines) and rate."""
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nfailures_per_1000_node_days: 5\nfamilies:\n  gpu_hw: {count: 3}\n  hang: {count: 1}\n"
    )
    assert main(["simulate", "--mix", str(path), "--gpus", "1024", "--days", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mix"]["shares"] == {"gpu_hw": 0.75, "hang": 0.25}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed\n", "not valid YAML (line 2"),
        ("name: x\nfailures_per_1000_node_days: 1\nfamilies: {nope: {count: 1}}\n", "families.nope: unknown family"),
        ("name: x\nfailures_per_1000_node_days: 1\nfamilies: {hang: {count: 1}}\nsettings: {gpus: -5}\n",
         "settings.gpus"),
    ],
)  # fmt: skip
def test_a_bad_mix_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    """Bad YAML, an unknown family, a bad setting: one line naming the file and key, no traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["simulate", "--mix", str(path), "--days", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and expected in err


def test_an_unknown_mix_name_or_policy_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--mix", "llama4"]) == 2
    assert "neither a shipped mix" in capsys.readouterr().err
    assert main(["simulate", "--policies", "autoexp,magic", "--days", "1"]) == 2
    assert "magic" in capsys.readouterr().err


def test_also_runs_ours_again_with_other_overrides_on_the_same_faults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--also restart=fleet: a fifth row, `autoexp[restart=fleet]`, on the same fault sequence."""
    args = [
        "simulate",
        "--mix",
        "llama3",
        "--gpus",
        "4096",
        "--days",
        "7",
        "--json",
        "--also",
        "restart=fleet",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"autoexp", "autoexp[restart=fleet]"} <= set(out["policies"])
    # The same sequence: each met a prefix of it (a policy that lost more time met fewer).
    assert 0 < out["policies"]["autoexp[restart=fleet]"]["faults"] <= out["faults"]


def test_plot_writes_ettr_against_job_size_and_checkpoint_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot DIR: two PNGs (matplotlib, the `plot` extra, a dev dependency) and the data drawn in the JSON."""
    args = ["simulate", "--mix", "kokolis", "--days", "0.25", "--json", "--plot", str(tmp_path)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    files = out["plots"]["files"]
    assert set(files) == {"job_size", "checkpoint_interval"}
    for path in files.values():
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sizes = out["plots"]["data"]["job_size"]
    assert sizes["values"] == [1024, 2048, 4096, 8192, 16384]
    assert all(len(v) == 5 for v in sizes["ettr"].values()) and "oracle" in sizes["ettr"]


def test_preflight_catches_must_name_families_of_the_mix(capsys: pytest.CaptureFixture[str]) -> None:
    """A family the mix does not have: one line naming the flag, exit 2, no traceback."""
    code = main(["simulate", "--mix", "llama3", "--days", "1", "--preflight", "60",
                 "--preflight-catches", "gpu_hw,gremlins"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--preflight-catches: gremlins is no family of mix llama3" in err
    assert "Traceback" not in err
