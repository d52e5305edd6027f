"""A raised exception is read by its class first, its message second (core/classify/exception_types.py).

Every row of the class tables is checked on a line of its own, with a message that says nothing by itself,
so the class alone must give the listed reading; the errno and message readers are checked on catch-all
classes (OSError, RuntimeError, ValueError). The same words outside a raised exception's line (a warning,
a notice, a progress line) must stay healthy.
"""

from __future__ import annotations

import errno
import os

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.exception_types import (
    CPP_EXCEPTION_CLASS,
    ERRNO_CLASS,
    EXCEPTION_CLASS,
    decide_exception_message,
    raised_class,
)
from oellm_autoexp.core.classify.root_cause import log_cause

PATTERNS = load_patterns(["megatron_production"])


def reading(*lines: str) -> str | None:
    cause = log_cause(classify_lines(list(lines), PATTERNS))
    return cause.error_type if cause is not None else None


@pytest.mark.parametrize(("name", "expected"), sorted(EXCEPTION_CLASS.items()))
def test_every_exception_class_reads_as_listed(name: str, expected: str) -> None:
    """`<Class>: <a message that says nothing>` reads as the class's row, bare or behind a module path."""
    assert reading(f"{name}: the thing went wrong") == expected
    assert reading(f"[rank3]: somepackage.errors.{name}: the thing went wrong") == expected


@pytest.mark.parametrize(("name", "expected"), sorted(ERRNO_CLASS.items()))
def test_every_errno_reads_as_listed(name: str, expected: str) -> None:
    """A catch-all OSError is read by its `[Errno N]` (the platform's number for the name)."""
    number = getattr(errno, name)
    assert reading(f"OSError: [Errno {number}] {os.strerror(number)}: '/some/where'") == expected


@pytest.mark.parametrize(("type_name", "expected"), sorted(CPP_EXCEPTION_CLASS.items()))
def test_every_cpp_exception_type_reads_as_listed(type_name: str, expected: str) -> None:
    """libstdc++'s terminate line names the C++ exception's type, and the type decides."""
    assert (
        reading(f"terminate called after throwing an instance of '{type_name}'", "  what():  boom")
        == expected
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # catch-all classes: the message decides
        (["RuntimeError: the thing went wrong"], "exception"),
        (["Exception: the thing went wrong"], "exception"),
        (["KeyError: 'model'"], "exception"),
        (
            [
                "ValueError: Expected parameter loc (Tensor of shape (8, 2)) to satisfy the constraint Real(), "
                "but found invalid values: tensor([[nan, nan]], device='cuda:0')"
            ],
            "numerical_instability",
        ),
        (
            ["RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."],
            "numerical_instability",
        ),
        (
            ["ValueError: Input contains NaN, infinity or a value too large for dtype('float32')."],
            "numerical_instability",
        ),
        (
            [
                "torch._C._LinAlgError: linalg.cholesky: The factorization could not be completed because the input "
                "is not positive-definite (the leading minor of order 3 is not positive-definite)."
            ],
            "numerical_instability",
        ),
        (["OSError: [Errno 12] Cannot allocate memory"], "oom"),
        (
            [
                "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory"
            ],
            "oom",
        ),
        (["numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.2 TiB for an array"], "oom"),
        (
            [
                "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGKILL: 9>."
            ],
            "killed",
        ),
        (
            ["subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."],
            "exception",
        ),
        (["OSError: [Errno 98] Address already in use"], "rendezvous"),
        (
            ["omegaconf.errors.MissingMandatoryValue: Missing mandatory value: model.hidden_size"],
            "config_error",
        ),
        (["hydra.errors.ConfigCompositionException: Could not override 'trainer.devices'."], "config_error"),
        (
            ["pydantic_core._pydantic_core.ValidationError: 1 validation error for TrainConfig"],
            "config_error",
        ),
        (["yaml.scanner.ScannerError: mapping values are not allowed here"], "config_error"),
        (["_pickle.UnpicklingError: invalid load key, '<'."], "config_error"),
        (["FileNotFoundError: [Errno 2] No such file or directory: 'data/tokenizer.json'"], "config_error"),
        (["PermissionError: [Errno 13] Permission denied: '/scratch/run3/ckpt'"], "config_error"),
        (["terminate called after throwing an instance of 'c10::Error'", "  what():  std::bad_alloc"], "oom"),
        (
            [
                "terminate called after throwing an instance of 'std::runtime_error'",
                "  what():  Cannot allocate memory",
            ],
            "oom",
        ),
        # a configuration rule the message states; a message that only reports what it found is the code's bug
        (["ValueError: tensor_model_parallel_size must be a divisor of 12"], "config_error"),
        (["AssertionError: fp8 is not supported on this GPU"], "config_error"),
        (["ValueError: unknown model type 'gpt5'"], "config_error"),
        # Megatron-LM's argument checks (validate_args): the rules it states, and options it names
        (
            ["AssertionError: --use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp"],
            "config_error",
        ),
        (
            ["AssertionError: --overlap-param-gather only supported with distributed optimizer"],
            "config_error",
        ),
        (
            ["AssertionError: --rl-generation-lag and --rl-max-inflight-requests are mutually exclusive."],
            "config_error",
        ),
        (
            ["AssertionError: --cuda-graph-scope and --cuda-graph-modules cannot be used together."],
            "config_error",
        ),
        (["AssertionError: world size (12) is not divisible by total_model_size (8)"], "config_error"),
        (
            ["AssertionError: Group query attention is mutually exclusive with multi latent attention."],
            "config_error",
        ),
        (["AssertionError: can only specify one of lr-warmup-fraction and lr-warmup-iters"], "config_error"),
        # an installation or node that cannot run the job, in the emitters' words (exception_types.py
        # _ENVIRONMENT_RULE): glibc's loader under OSError, an environment variable that is not set, two
        # versions that do not go together, a build or GPU without what the job asks for
        (
            ["OSError: libcudart.so.12: cannot open shared object file: No such file or directory"],
            "config_error",
        ),
        (["OSError: /opt/lib/image.so: undefined symbol: _ZN3c106detail"], "config_error"),
        (
            ["OSError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by /opt/lib/libbnb.so)"],
            "config_error",
        ),
        (
            [
                "ValueError: Error initializing torch.distributed using env:// rendezvous: "
                "environment variable MASTER_ADDR expected, but not set"
            ],
            "config_error",
        ),
        (
            ["OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root."],
            "config_error",
        ),
        (
            [
                "AssertionError: Using tensor model parallelism or context parallelism require setting "
                "the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"
            ],
            "config_error",
        ),
        (
            [
                "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used "
                "to compile PyTorch (12.1). Please make sure to use the same CUDA versions."
            ],
            "config_error",
        ),
        (
            [
                "Exception: >- DeepSpeed Op Builder: Installed CUDA version 11.3 does not match the "
                "version torch was compiled with 11.7, unable to compile cuda/cpp extensions without "
                "a matching cuda version."
            ],
            "config_error",
        ),
        (
            ["RuntimeError: jaxlib version 0.4.30 is newer than and incompatible with jax version 0.4.23."],
            "config_error",
        ),
        (["AssertionError: Torch not compiled with CUDA enabled"], "config_error"),
        (["RuntimeError: Distributed package doesn't have MPI built in."], "config_error"),
        (
            ["AssertionError: Device compute capability 8.9 or higher required for FP8 execution."],
            "config_error",
        ),
        (["RuntimeError: FlashAttention only supports Ampere GPUs or newer."], "config_error"),
        (
            [
                "RuntimeError: Found Tesla V100-SXM2-32GB which is too old to be supported by the "
                "triton GPU compiler, which is used as the backend."
            ],
            "config_error",
        ),
        (["AssertionError: Invalid device id"], "config_error"),
        (["ValueError: Invalid backend: 'ncl'"], "config_error"),
        # ... and the same words in torch's and Megatron's warnings stay healthy
        (
            [
                "UserWarning: NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible "
                "with the current PyTorch installation."
            ],
            None,
        ),
        (
            [
                "UserWarning: When using sequence parallelism it is recommended to set the environment "
                "variable CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup"
            ],
            None,
        ),
        (["ValueError: Expected input batch_size (1324) to match target batch_size (0)."], "exception"),
        # PCCL's PCCLError naming its master connection failure (the rendezvous never happened)
        (
            [
                "pccl._pccl.PCCLError: pcclUpdateTopology failed with error: MASTER_CONNECTION_FAILED: "
                "MASTER_CONNECTION_FAILED"
            ],
            "rendezvous",
        ),
        (
            ["pccl._pccl.PCCLError: pcclAllReduce failed with error: INVALID_USAGE: INVALID_USAGE"],
            "exception",
        ),
        (["RuntimeError: shape '[4, -1]' is invalid for input of size 10"], "exception"),
        (
            ["RuntimeError: raising an error since --throw was specified"],
            "exception",
        ),  # names an option, no rule
        (["ValueError: too many values to unpack (expected 2)"], "exception"),
        # the class's own reading wins over words in its message
        (["FileNotFoundError: [Errno 2] No such file or directory: 'nan_stats.json'"], "config_error"),
        # ... and no reading at all where no exception was raised
        (["UserWarning: input contains nan values, they are masked"], None),
        (["WARNING FileNotFoundError: optional cache missing, rebuilding"], None),
        (["2024-05-01 10:00:00 WARNING FileNotFoundError: optional cache missing, rebuilding"], None),
        (["loss is nan-free, no error"], None),
        (["iteration 100/ 1000 | lm loss: 2.31 | grad norm: inf | number of nan iterations: 0 |"], None),
        (["terminate called after throwing an instance of 'c10::Error'", "  what():  boom"], None),
        # a time stamp before the raised exception's line is not part of it
        (["2023-11-20T16:03:25.1234567Z ModuleNotFoundError: No module named 'apex'"], "config_error"),
    ],
)
def test_a_raised_exception_reads_by_class_then_message(lines: list[str], expected: str | None) -> None:
    """The lines give the listed cause (None: no cause)."""
    assert reading(*lines) == expected


def test_the_class_is_read_before_the_message() -> None:
    """A class with a reading of its own keeps it whatever its message says; a catch-all one defers to it."""
    assert raised_class("FloatingPointError", "[Errno 2] No such file") == "numerical_instability"
    assert raised_class("RuntimeError", "[Errno 2] No such file") == "config_error"
    assert decide_exception_message("torch.cuda.OutOfMemoryError") == "oom"
    assert decide_exception_message("not an exception line at all") == "exception"
