"""The megatron_torchrun backend: script or module, and the walltime signal Megatron stops on."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from oellm_autoexp.backends.base import LaunchContext
from oellm_autoexp.backends.megatron_torchrun import build_argv, exit_signal
from oellm_autoexp.config.experiment import JobConfig
from oellm_autoexp.config.models import MegatronTorchrunBackend, RootConfig
from oellm_autoexp.config.sweep import NO_SWEEP
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.plan import build_plans

CTX = LaunchContext(nodes=1, nproc_per_node=2, checkpoint_dir="/ck", output_dir="/out")


def _backend(**fields: Any) -> MegatronTorchrunBackend:
    return MegatronTorchrunBackend.model_validate({"kind": "megatron_torchrun", **fields})


def _plan(backend: dict[str, Any], signal: dict[str, Any]):
    cfg = RootConfig.model_validate(
        {
            "experiment": {"name": "exp", "output_dir": "runs"},
            "backend": {"kind": "megatron_torchrun", **backend},
            "slurm": {"signal": {"enabled": True, **signal}},
        }
    )
    (plan,) = build_plans([JobConfig(NO_SWEEP, cfg, "e.yaml")], "/base")
    return plan


def test_module_runs_with_dash_m_and_megatron_flags() -> None:
    """`module` gives `torchrun ... -m <module> --flags --save --load`; no script is rendered."""
    argv = build_argv(_backend(module="pkg.train", megatron={"train_iters": 10}), CTX)
    entry = argv.index("-m")
    assert argv[entry : entry + 4] == ["-m", "pkg.train", "--train-iters", "10"]
    assert argv[-4:] == ["--save", "/ck", "--load", "/ck"]
    assert not any(word.endswith(".py") for word in argv)


def test_script_is_found_under_megatron_path() -> None:
    """Without `module`, the default script sits in the Megatron-LM checkout."""
    argv = build_argv(_backend(megatron_path="/opt/Megatron-LM"), CTX)
    assert "/opt/Megatron-LM/pretrain_gpt.py" in argv and "-m" not in argv


def test_script_and_module_together_are_refused() -> None:
    """Naming both is ambiguous: the message says to set script to null."""
    with pytest.raises(ValidationError, match="script: null to run the module"):
        _backend(script="pretrain_gpt.py", module="pkg.train")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, None),
        ({"exit_signal_handler": True}, "TERM"),
        ({"exit_signal_handler": True, "exit_signal": "SIGUSR2"}, "USR2"),
    ],
)
def test_exit_signal_is_what_megatron_listens_for(options: dict[str, Any], expected: str | None) -> None:
    """--exit-signal-handler listens for --exit-signal, SIGTERM by default; without it, for nothing."""
    assert exit_signal(options) == expected


def test_walltime_usr1_is_forwarded_as_megatrons_sigterm() -> None:
    """USR1 from `--signal=B:USR1@N` is turned into SIGTERM for the ranks, not the launcher."""
    plan = _plan({"module": "pkg.train", "megatron": {"exit_signal_handler": True}}, {"name": "USR1"})
    assert "#SBATCH --signal=B:USR1@300" in plan.script
    assert 'trap "signal_workers TERM" USR1' in plan.script
    assert 'exec "$@"' not in plan.script


def test_same_signal_needs_no_translation() -> None:
    """Megatron told to listen for SIGUSR1 gets the walltime USR1 itself; the wrapper execs the launcher."""
    megatron = {"exit_signal_handler": True, "exit_signal": "SIGUSR1"}
    plan = _plan({"module": "pkg.train", "megatron": megatron}, {"name": "USR1"})
    assert 'exec "$@"' in plan.script and "signal_workers" not in plan.script


def test_forward_as_that_megatron_does_not_listen_for_is_a_user_error() -> None:
    """forward_as USR2 while Megatron stops on SIGTERM would never stop training: refused with both names."""
    with pytest.raises(UserError, match=r"forward_as: USR2.*SIGTERM"):
        _plan({"module": "pkg.train", "megatron": {"exit_signal_handler": True}}, {"forward_as": "USR2"})
