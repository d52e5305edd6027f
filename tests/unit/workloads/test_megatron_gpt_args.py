"""What oellm_autoexp.workloads.megatron_gpt refuses among Megatron's parsed arguments.

Megatron itself is not needed: the check reads an argparse-like namespace.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.torch  # the module imports torch

SUPPORTED = {
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "context_parallel_size": 1,
    "data_path": None,
    "train_data_path": None,
    "valid_data_path": None,
    "test_data_path": None,
}


def _problems(**changes: object) -> list[str]:
    from oellm_autoexp.workloads.megatron_gpt import check_supported

    return check_supported(SimpleNamespace(**{**SUPPORTED, **changes}))


def test_data_parallel_on_mock_data_is_accepted() -> None:
    """Sizes of 1 and no data paths: nothing to complain about."""
    assert _problems() == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tensor_model_parallel_size": 2}, "--tensor-model-parallel-size 2: only 1 is supported"),
        ({"pipeline_model_parallel_size": 4}, "--pipeline-model-parallel-size 4: only 1 is supported"),
        (
            {"data_path": ["1.0", "corpus_text_document"]},
            "--data-path: this entry point trains on Megatron's mock data only",
        ),
    ],
)
def test_unsupported_settings_are_named_with_their_flag(changes: dict[str, object], message: str) -> None:
    """Model parallelism and real data are refused, each by its Megatron flag."""
    assert _problems(**changes) == [message]
