"""Rules written in the review of the fitted corpus's misses (issue #26), each from what its emitter prints.

Every case is a log as a whole (several lines): the rules decide by what else the log holds. A
vendor library that could not start (cuDNN's and cuBLAS's NOT_INITIALIZED, ARCH_MISMATCH and version
statuses) is configuration unless an earlier CUDA error or an OOM explains it. The lines are written for
these tests from the emitters' formats; none is quoted from the held-out corpus. Round 8 (batch 12's fitted
misses): TensorFlow's NotFoundError classes, a parser's position in a raised message (serde_json, Python
json), NCCL's driver-API `Cuda failure 2 'out of memory'` as quoted by XLA and torch, and torch elastic's
first-failure report that follows its SIGTERMs.
"""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause

PATTERNS = load_patterns(["megatron_production"])


def cause_of(lines: list[str]) -> str | None:
    cause = log_cause(classify_lines(lines, PATTERNS))
    return cause.error_type if cause is not None else None


LIBRARY_SETUP = [
    # cuDNN's and cuBLAS's "could not start" statuses in every wrapper's words: configuration
    (["RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"], "config_error"),
    (["Error in CuDNN: CUDNN_STATUS_NOT_INITIALIZED"], "config_error"),
    (
        [
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] could not create cudnn handle: CUDNN_STATUS_NOT_INITIALIZED"
        ],
        "config_error",
    ),
    (
        [
            "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasGetProperty(MAJOR_VERSION, &major)`"
        ],
        "config_error",
    ),
    # ... except cublasCreate's: it allocates the handle's workspace on the GPU, and fails so when the GPU is full
    (["RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"], "oom"),
    (["RuntimeError: cuDNN error: CUDNN_STATUS_VERSION_MISMATCH"], "config_error"),
    # a kernel that failed stays the job's CUDA error
    (["RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"], "cuda_error"),
    (
        [
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`"
        ],
        "cuda_error",
    ),
    # an earlier device-side assert (the context is unusable, the handle creation then fails) is the cause
    (
        [
            "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [18,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        ],
        "cuda_error",
    ),
    # ... and so is a CUDA OOM (cudnnCreate could not allocate its handle)
    (
        [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB",
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
        ],
        "oom",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), LIBRARY_SETUP)
def test_a_library_that_could_not_start_is_configuration(lines: list[str], expected: str) -> None:
    """cuDNN/cuBLAS setup statuses read config_error alone, never over an earlier CUDA error or an OOM."""
    assert cause_of(lines) == expected


STEP = "slurmstepd: error: *** STEP 4714782.0 ON gpu-001 CANCELLED AT 2023-11-29T15:47:21 ***"
STEP_CANCELS = [
    # alone (or with the job's own chatter and srun's teardown): the step was cancelled from outside
    ([STEP], "cancelled"),
    (
        [
            "epoch 3 step 1200 loss 2.31",
            STEP,
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        ],
        "cancelled",
    ),
    # a task that failed shows itself: srun's exit-code line makes the cancel srun's own teardown
    (["srun: error: gpu-001: task 0: Exited with exit code 1", STEP], None),
    (["[E] failed (exitcode: 1) local_rank: 0 (pid: 4242) of binary: /usr/bin/python3", STEP], "exception"),
    # any cause in view is the cause
    (["RuntimeError: CUDA error: an illegal memory access was encountered", STEP], "cuda_error"),
    (
        [
            STEP,
            "slurmstepd: error: *** JOB 4714782 ON gpu-001 CANCELLED AT 2023-11-29T15:48:20 DUE TO PREEMPTION ***",
        ],
        "preempted",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), STEP_CANCELS)
def test_a_bare_step_cancel_with_nothing_else_is_a_cancel_from_outside(
    lines: list[str], expected: str | None
) -> None:
    """Slurm < 24.05's reasonless STEP cancel: `cancelled` only when no cause and no failed task is in view."""
    assert cause_of(lines) == expected


LATEST = (
    "[2025-01-07 10:02:11,481] [WARNING] [engine.py:2911:load_checkpoint] Unable to find latest file at"
    " runs/exp7/latest, if trying to load latest checkpoint please ensure this file exists or pass an explicit"
    " checkpoint tag when loading a checkpoint."
)
DEEPSPEED_LOADS = [
    # the warning alone: a job that resumes if it can starts fresh
    ([LATEST], None),
    ([LATEST, "epoch 0 step 10 loss 7.12"], None),
    # a traceback at once after it: the caller failed on the empty load (the path holds no DeepSpeed checkpoint)
    ([LATEST, "[rank0]: Traceback (most recent call last):"], "config_error"),
    (
        [
            LATEST,
            "Traceback (most recent call last):",
            "RuntimeError: DeepSpeed was unable to load the checkpoint. Ensure you passed in a DeepSpeed compatible"
            " checkpoint or a single checkpoint file by setting `DeepSpeedStrategy(..., load_full_weights=True)`.",
        ],
        "config_error",
    ),
    # a traceback much later, or one whose own last line is read, is not about the load
    ([LATEST, *[f"epoch 0 step {i} loss 7.1" for i in range(5)], "Traceback (most recent call last):"], None),
    (
        [
            LATEST,
            "Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ],
        "oom",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), DEEPSPEED_LOADS)
def test_a_raise_right_after_deepspeed_found_no_latest_file_is_configuration(
    lines: list[str], expected: str | None
) -> None:
    """DeepSpeed's `Unable to find latest file` is no cause alone; a traceback right after it is the failed load."""
    assert cause_of(lines) == expected


def test_every_after_names_a_shipped_pattern() -> None:
    """An `after:` (catalog patterns are named by position, `checkpoint_files.18`) names a pattern of the set."""
    names = set(PATTERNS.names())
    afters = [(p.name, p.after) for p in PATTERNS.patterns if p.after is not None]
    assert ("deepspeed_latest_missing_raised", "checkpoint_files.18") in afters
    assert [(name, after) for name, after in afters if after not in names] == []


def xid(pci: str, code: int, pid: int) -> str:
    return (
        f"[Mon Mar  3 10:0{pid % 10}:00 2025] NVRM: Xid (PCI:0000:{pci}:00): {code}, pid={pid}, Ch 00000008"
    )


XID_PATTERNS = [
    # the application's Xids for three different processes on one GPU, on no other: that GPU
    ([xid("3d", 43, 101), xid("3d", 43, 202), xid("3d", 31, 303)], "gpu_hardware"),
    ([xid("3d", 43, 101), xid("3d", 43, 202), xid("3d", 43, 303), xid("db", 31, 404)], "gpu_hardware"),
    # one process's burst, or two processes: the application's (NVIDIA's "solo, no burst: CHECK_APP")
    ([xid("3d", 13, 101), xid("3d", 13, 101), xid("3d", 13, 101), xid("3d", 43, 101)], "cuda_error"),
    ([xid("3d", 31, 101), xid("3d", 31, 202)], "cuda_error"),
    # the same on several GPUs: the application is the common factor ("repeat to diff GPU: CHECK_APP")
    ([*(xid("3d", 31, p) for p in (1, 2, 3)), *(xid("db", 31, p) for p in (4, 5, 6))], "cuda_error"),
    # Slurm's node failure stays above the GPU
    (
        [
            *(xid("3d", 43, p) for p in (1, 2, 3)),
            "slurmstepd: error: *** JOB 77 ON gpu-001 CANCELLED AT 2025-03-03T10:09:00 DUE TO NODE FAILURE ***",
        ],
        "node_failure",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), XID_PATTERNS)
def test_application_xids_recurring_on_one_gpu_are_the_gpus(lines: list[str], expected: str) -> None:
    """NVIDIA's Xid workflow: repeats on the same GPU (via PCI id) are a possible hardware issue."""
    assert cause_of(lines) == expected


# --- batch 12's fitted misses (round 8): each rule from its emitter's source, with the cases it must leave alone

TF = "tensorflow.python.framework.errors_impl"
TF_STATUSES = [
    # TensorFlow's NOT_FOUND / PERMISSION_DENIED / ALREADY_EXISTS classes (tf.errors): a path, like OSError's subclasses
    ([f"{TF}.NotFoundError: /data/run1/model.ckpt-1000.index; No such file or directory"], "config_error"),
    ([f"{TF}.PermissionDeniedError: /mnt/out/events.out.tfevents.1; Permission denied"], "config_error"),
    ([f"{TF}.AlreadyExistsError: File already exists: /mnt/out/saved_model.pb"], "config_error"),
    # the catch-all statuses stay the program's own exception; its memory status stays memory
    ([f"{TF}.InvalidArgumentError: Incompatible shapes: [32,10] vs. [32,12]"], "exception"),
    ([f"{TF}.InternalError: Failed to call ThenRnnForward with model config"], "exception"),
    ([f"{TF}.ResourceExhaustedError: OOM when allocating tensor with shape[64,512,512]"], "oom"),
    # restoring is a notice, not a failure
    (["INFO:tensorflow:Restoring parameters from /data/run1/model.ckpt-1000"], None),
]


@pytest.mark.parametrize(("lines", "expected"), TF_STATUSES)
def test_tensorflows_not_found_classes_are_configuration(lines: list[str], expected: str | None) -> None:
    """tf.errors.NotFoundError and its path twins read as a missing or forbidden path, other statuses do not."""
    assert cause_of(lines) == expected


PARSE_ERRORS = [
    # serde_json's `{reason} at line {l} column {c}` (tokenizers raises it as a bare Exception) and Python json's
    # `{reason}: line {l} column {c} (char {p})` under a catch-all class: a file that does not parse
    (["Exception: expected value at line 1 column 1"], "config_error"),
    (["Exception: EOF while parsing an object at line 812 column 0"], "config_error"),
    (["Exception: missing field `vocab` at line 24 column 3"], "config_error"),
    (["ValueError: Expecting value: line 1 column 1 (char 0)"], "config_error"),
    # without the parser's position the words say nothing by themselves
    (["Exception: expected value"], "exception"),
    (["ValueError: too many values to unpack (expected 2)"], "exception"),
    # the same position in a line that is not a raised exception's last line is no failure
    (["WARNING: tokenizer.json: unexpected key at line 3 column 5, ignored"], None),
    # an earlier root still wins over the raise
    (
        [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "Exception: expected value at line 1 column 1",
        ],
        "oom",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), PARSE_ERRORS)
def test_a_raise_that_names_a_parsers_position_is_configuration(
    lines: list[str], expected: str | None
) -> None:
    """serde_json's and Python json's position suffix marks a file that does not parse, under any class."""
    assert cause_of(lines) == expected


XLA_NCCL = (
    "xla/service/gpu/runtime/nccl_api.cc:120: NCCL operation ncclAllReduce(send_buffer, recv_buffer, count, dtype,"
    " reduce_op, comm, stream) failed: unhandled cuda error (run with NCCL_DEBUG=INFO for details). Last NCCL"
    " warning(error) log entry (may be unrelated) 'Cuda failure {warning}'."
)
TORCH_NCCL = [
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled"
    " cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
    "Last error:",
]
NCCL_CUDA_FAILURES = [
    # NCCL's driver-API form `Cuda failure %d '%s'` (cudawrap.h) and its runtime form `Cuda failure '%s'` (checks.h)
    (["node1:2104:2391 [0] transport/p2p.cc:200 NCCL WARN Cuda failure 2 'out of memory'"], "oom"),
    (["node1:2104:2391 [0] transport/p2p.cc:200 NCCL WARN Cuda failure 'out of memory'"], "oom"),
    # ... quoted by XLA's status as NCCL's last warning, or by torch's `Last error:`: the allocation is the root
    ([XLA_NCCL.format(warning="2 'out of memory'")], "oom"),
    ([*TORCH_NCCL, "Cuda failure 2 'out of memory'"], "oom"),
    # another CUDA failure in the same words is not memory
    (
        [
            "node1:2104:2391 [0] enqueue.cc:1234 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'"
        ],
        "cuda_error",
    ),
    (["node1:2104:2391 [0] misc/cudawrap.cc:120 NCCL WARN Cuda failure 1 'invalid argument'"], "cuda_error"),
    # ... and the quoted CUDA error is the cause by its own class, not the NCCL result around it (base.yaml
    # nccl_quoted_cuda_failure; session 12: this row read `nccl` before)
    ([XLA_NCCL.format(warning="1 'invalid argument'")], "cuda_error"),
    ([*TORCH_NCCL, "Cuda failure 'peer access is not supported between these two devices'"], "cuda_error"),
    ([*TORCH_NCCL, "Cuda failure 'invalid device ordinal'"], "config_error"),
]


@pytest.mark.parametrize(("lines", "expected"), NCCL_CUDA_FAILURES)
def test_nccls_cuda_failure_out_of_memory_is_memory_in_every_form(lines: list[str], expected: str) -> None:
    """NCCL's `Cuda failure [N] 'out of memory'`, also quoted as its last warning, is an OOM; other failures are not."""
    assert cause_of(lines) == expected


SIGTERM = "W0101 00:00:00.000000 1 torch/distributed/elastic/multiprocessing/api.py:890] Sending process {pid} closing signal SIGTERM"
FAILED = (
    "E0101 00:00:01.000000 1 torch/distributed/elastic/multiprocessing/api.py:862] failed (exitcode: {code})"
    " local_rank: 0 (pid: 100) of binary: /usr/bin/python"
)
ELASTIC_TEARDOWNS = [
    # the agent stops the others first, then names the first failure: exit code 1 is the worker's own exit
    ([SIGTERM.format(pid=101), FAILED.format(code=1)], "exception"),
    ([SIGTERM.format(pid=101), SIGTERM.format(pid=102), FAILED.format(code=1)], "exception"),
    # ... and its exception above, when in view, says what
    (
        [
            "ValueError: Expecting value: line 1 column 1 (char 0)",
            SIGTERM.format(pid=101),
            FAILED.format(code=1),
        ],
        "config_error",
    ),
    # a negative code is the signal that killed it; the teardown alone is a silent death
    ([SIGTERM.format(pid=101), FAILED.format(code=-9)], "killed"),
    ([SIGTERM.format(pid=101)], "killed"),
    # a stop the agent was asked for is no worker's death
    (
        [
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 99 got signal: 15",
            SIGTERM.format(pid=101),
        ],
        None,
    ),
]


@pytest.mark.parametrize(("lines", "expected"), ELASTIC_TEARDOWNS)
def test_elastic_reports_the_first_failure_after_its_sigterms(lines: list[str], expected: str | None) -> None:
    """torch elastic logs `failed (exitcode: N)` after `Sending process ... SIGTERM`: the code decides, not the order."""
    assert cause_of(lines) == expected
