"""A tiny GPT pretrained with megatron-core's own training loop, on Megatron's mock data.

    torchrun --nproc_per_node=2 -m oellm_autoexp.workloads.megatron_gpt \\
        --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 \\
        --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8 \\
        --train-iters 300 --lr 1e-3 --tokenizer-type NullTokenizer --vocab-size 1024 \\
        --transformer-impl local --no-persist-layer-norm --no-gradient-accumulation-fusion \\
        --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion \\
        --save CKPT --load CKPT --save-interval 50 --log-interval 10 --exit-signal-handler

Every flag is Megatron's own and is parsed by Megatron's parser
(`megatron.training.arguments`), so it means here what it means in Megatron-LM; this
module adds none. What it supplies is what `pretrain()` asks of a training script: the
model config (GPT with the local, non-Transformer-Engine layer spec), the datasets
(`MockGPTDataset`: random tokens, no files) and the forward step with its loss. The
tokenizer is whatever `--tokenizer-type` names; `NullTokenizer` with `--vocab-size` needs
no files either. Checkpointing (`--save/--load`), the exit-signal handler, the NaN/Inf
rerun machinery and the exit codes are Megatron's (docs/workloads.md lists them). A fault
for the monitor's tests comes through the environment (AUTOEXP_FAULT, see workloads.faults),
since the flags are Megatron's alone.

Written against megatron-core 0.19.2 (pip extra `megatron`). Data parallel only: tensor,
pipeline and context parallel sizes other than 1 are refused (the forward step below
does not broadcast batches between model-parallel ranks).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import torch

from oellm_autoexp.workloads import faults, megatron_compat

_UNSUPPORTED_PARALLELISM = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
)
_DATA_FLAGS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")
_BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")


def check_supported(args: Any) -> list[str]:
    """What in the parsed Megatron args this entry point cannot run (empty: all fine)."""
    problems = [
        f"--{name.replace('_', '-')} {getattr(args, name)}: only 1 is supported"
        for name in _UNSUPPORTED_PARALLELISM
        if (getattr(args, name, 1) or 1) != 1
    ]
    problems += [
        f"--{name.replace('_', '-')}: this entry point trains on Megatron's mock data only"
        for name in _DATA_FLAGS
        if getattr(args, name, None)
    ]
    return problems


def model_config(args: Any) -> Any:
    """GPT from the parsed args, always with the local (torch-only) layer spec."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.training.argument_utils import gpt_config_from_args

    cfg = gpt_config_from_args(args)
    transformer = cfg.transformer
    cfg.transformer_layer_spec = get_gpt_layer_local_spec(
        qk_layernorm=transformer.qk_layernorm, normalization=transformer.normalization
    )
    return cfg


def dataset_config(args: Any, tokenizer: Any) -> Any:
    """Mock GPT data: no blend given, so megatron-core draws random token documents."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        split=args.split,
        tokenizer=tokenizer,
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
    )


def build_datasets(num_samples: Sequence[int]) -> list[Any]:
    """pretrain()'s dataset provider: train/valid/test MockGPTDatasets of these sizes."""
    from megatron.core import mpu
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import MockGPTDataset
    from megatron.training import get_args, get_tokenizer

    config = dataset_config(get_args(), get_tokenizer())
    on_rank = mpu.get_tensor_model_parallel_rank() == 0
    return BlendedMegatronDatasetBuilder(MockGPTDataset, list(num_samples), lambda: on_rank, config).build()


# Megatron's builder is distributed-aware: every rank calls it (pretrain() reads this flag).
build_datasets.is_distributed = True  # type: ignore[attr-defined]


def next_batch(data_iterator: Iterator[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor | None]:
    """One micro-batch on this rank's GPU (absent keys, e.g. no attention mask, stay None)."""
    sample = next(data_iterator)
    return {key: _to_gpu(sample.get(key)) for key in _BATCH_KEYS}


def _to_gpu(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.cuda(non_blocking=True)


def masked_loss(
    loss_mask: torch.Tensor, output_tensor: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Summed token loss, token count, and `lm loss` for Megatron's log line.

    A NaN or Inf loss goes to Megatron's rerun state machine (fatal): it decides, per
    --rerun-mode, whether to re-run the step, save and exit 16, or stop.
    """
    from megatron.core.rerun_state_machine import get_rerun_state_machine
    from megatron.training import get_args

    mask = loss_mask.view(-1).float()
    loss = torch.sum(output_tensor.view(-1).float() * mask)
    num_tokens = mask.sum().to(torch.int)
    if get_args().check_for_nan_in_loss_and_grad:
        machine = get_rerun_state_machine()
        for reject, what in ((torch.isnan, "NaN"), (torch.isinf, "Inf")):
            machine.validate_result(
                result=loss,
                rejection_func=reject,
                message=f"found {what} in local forward loss calculation",
                tolerance=0.0,  # the forward pass is deterministic
                fatal=True,
            )
    report = torch.cat([loss.detach().view(1), num_tokens.detach().view(1).float()])
    return loss, num_tokens, {"lm loss": report}


def forward_step(data_iterator: Iterator[dict[str, torch.Tensor]], model: Any) -> tuple[torch.Tensor, Any]:
    """pretrain()'s forward step: the model's per-token losses and how to reduce them."""
    from megatron.training import get_timers

    _inject_asked_fault(model)
    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    batch = next_batch(data_iterator)
    timers("batch-generator").stop()
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(masked_loss, batch["loss_mask"])


_ASKED = faults.from_env(os.environ)


def _inject_asked_fault(model: Any) -> None:
    """The fault AUTOEXP_FAULT asks for, at the start of its iteration on its rank (read once)."""
    if _ASKED is None:
        return
    from megatron.training import get_args

    iteration = int(getattr(get_args(), "curr_iteration", 0)) + 1  # the iteration being computed
    rank = torch.distributed.get_rank()
    if faults.is_due(_ASKED.fault, _ASKED.at_step, _ASKED.rank, iteration, rank) and _ASKED.armed():
        faults.inject(_ASKED.fault, iteration, rank, torch.device("cuda", torch.cuda.current_device()), model)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse Megatron's flags, then hand over to megatron.training.pretrain()."""
    from megatron.core.enums import ModelType
    from megatron.training import pretrain
    from megatron.training.argument_utils import pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    megatron_compat.use_prebuilt_dataset_helpers()
    args = parse_and_validate_args()
    problems = check_supported(args)
    if problems:
        print("megatron_gpt: " + "; ".join(problems), file=sys.stderr)
        return 2
    container = pretrain_cfg_container_from_args(args, model_config(args))
    pretrain(container, build_datasets, ModelType.encoder_or_decoder, forward_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
