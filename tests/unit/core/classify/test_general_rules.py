"""General rules of the shipped patterns (config/monitoring/base.yaml, exit_reports.py) read lines in any wording.

Each rule below was written from what the emitters print, not from one quoted line: a raised
exception saying the checkpoint is missing (any trainer's words), a shell's report of a child a
signal took, srun's task launch refused for the step's own request, and Slurm refusals the request
itself did not cause. The same words printed as a notice (no exception) must stay healthy.
"""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause

PATTERNS = load_patterns(["megatron_production"])

CASES = [
    # a raised exception naming a missing checkpoint: configuration
    ("ValueError: checkpoint not found", "config_error"),
    ("AssertionError: no checkpoint found at './checkpoints/model_best.pth.tar'", "config_error"),
    ("FileNotFoundError: checkpoint /ckpt/run3/epoch_7.pth does not exist", "config_error"),
    ("RuntimeError: Attempted to load checkpoint, but no checkpoint found at /ckpt/run3", "config_error"),
    ("ValueError: Unable to find checkpoint for 'global_step100'", "config_error"),
    ("KeyError: checkpoint file not found", "config_error"),
    ("[rank0]: RuntimeError: Checkpoint directory /ckpt/run3 does not exist", "config_error"),
    ("OSError: weights/best.pt can not be found", "config_error"),
    ("RuntimeError: Could not find model_best.pth.tar in ./output", "config_error"),
    ("ValueError: Checkpoint loaded from run3/last.pt has wrong keys", "exception"),
    (
        "RuntimeError: "
        + "checkpoint shard 7 of 64 loaded, " * 400
        + "then the optimizer state failed to load",
        "exception",
    ),
    # ... but the same words as a notice, a warning, or a name that only starts with the word: no cause
    ("=> no checkpoint found at 'checkpoint.pth.tar'", None),
    ("No checkpoint found at /ckpt/run3, training from scratch", None),
    ("UserWarning: checkpoint not found, training from scratch", None),
    ("ValueError: No checkpoint_callback configured", "exception"),
    # a shell's report of a child a signal ended
    ("Killed", "killed"),
    ("zsh: killed     python train.py", "killed"),
    (
        "/var/spool/slurmd/job42/slurm_script: line 12: 40213 Illegal instruction     (core dumped) python train.py",
        "segfault",
    ),
    ("run.sh: line 5: 12345 Floating point exception(core dumped) python x.py", "segfault"),
    ("zsh: illegal hardware instruction  python train.py", "segfault"),
    ("zsh: trace trap  python train.py", "segfault"),
    ("run.sh: line 12: 23817 Trace/breakpoint trap   (core dumped) python3 train.py", "segfault"),
    # the strsignal text alone on its line (dash; bash for the script's last command)
    ("Illegal instruction", "segfault"),
    ("Floating point exception (core dumped)", "segfault"),
    ("Trace/breakpoint trap", "segfault"),
    # ... but not the same words inside another message
    ("Note: an Illegal instruction here means the CPU lacks AVX2", None),
    ("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)", "segfault"),
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "killed"),
    ("Process finished with exit code 130 (interrupted by signal 2: SIGINT)", None),
    ("Killed 3 stale workers before the restart", None),
    # any CUDA/HIP error name a program reports; the names AMD_LOG_LEVEL logs print on healthy runs are not errors
    ("Failed to launch CUDA kernel: fusion_12: CUDA_ERROR_INVALID_VALUE: invalid argument", "cuda_error"),
    ("parallel_for failed: cudaErrorInvalidConfiguration: invalid configuration argument", "cuda_error"),
    (
        ":3:hip_event.cpp            :345 : 1234 us: [pid:1 tid:0x7f] hipEventQuery: Returned hipErrorNotReady :",
        None,
    ),
    (
        ":3:hip_peer.cpp :345 : 1 us: hipDeviceEnablePeerAccess: Returned hipErrorPeerAccessAlreadyEnabled :",
        None,
    ),
    ("cudaError_t err = cudaGetLastError();", None),
    # a DataLoader worker's exception re-raised by the main process: its name decides where it says enough
    ("FileNotFoundError: Caught FileNotFoundError in DataLoader worker process 3.", "config_error"),
    ("MemoryError: Caught MemoryError in DataLoader worker process 0.", "oom"),
    ("KeyError: Caught KeyError in DataLoader worker process 1.", "exception"),
    # memory in every allocator's words, also cut short
    ("RuntimeError: CUDA out of memory.", "oom"),
    ("torch.cuda.OutOfMemoryError", "oom"),
    ("python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0", "oom"),
    # a job's end state as sacct, scontrol and seff print it: the state decides, FAILED/COMPLETED/live say nothing
    ("123.0            python        gpu       acct          8 OUT_OF_ME+    0:125", "oom"),
    ("123          train        gpu       acct          8  NODE_FAIL      0:0", "node_failure"),
    ("123          train        gpu       acct          8    TIMEOUT      0:0", "time_limit"),
    ("123          train        gpu       acct          8     FAILED      1:0", None),
    ("   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)", "node_failure"),
    ("   JobState=RUNNING Reason=None Dependency=(null)", None),
    ("State: OUT_OF_MEMORY (exit code 0)", "oom"),
    ("State: COMPLETED (exit code 0)", None),
    ("NCCL_TIMEOUT=1800", None),
    # srun: the step's own request, not the node
    (
        "srun: error: Task launch for StepId=12.0 failed on node gpu07: Unable to satisfy cpu bind request",
        "config_error",
    ),
    ("srun: error: Task launch for StepId=12.0 failed on node gpu07: Job prolog failed", "node_failure"),
    # refusals the request did not cause: the job is ending, or its nodes are held by another step
    ("srun: error: Unable to create step for job 1234: Job/step already completing or completed", None),
    ("srun: error: Unable to create step for job 1234: Requested nodes are busy", None),
    (
        "srun: error: Unable to create step for job 1234: Requested node configuration is not available",
        "config_error",
    ),
    # a signal that ended a process, in any program's words: the signal decides; a teardown signal says nothing
    ("worker 3 was killed by signal 9", "killed"),
    ("child process exited due to signal 11 (Segmentation fault)", "segfault"),
    ("[job 12] ended with signal SIGBUS", "oom"),
    ("exit status 1: signal: killed", "killed"),
    ("received signal SIGTERM, saving a checkpoint and exiting", None),
    # an abort with no line saying why, memory in words no allocator pattern has
    ("Aborted (core dumped)", "segfault"),
    ("terminate called without an active exception", "segfault"),
    ("Aborted 3 stale requests", None),
    ("fork failed: Cannot allocate memory", "oom"),
    ("    Reason:       OOMKilled", "oom"),
    # a NaN/Inf loss in any trainer's spelling; not a word that only starts with it
    ("train_loss=nan", "numerical_instability"),
    ("Epoch 3 | Loss: NaN | lr 1e-4", "numerical_instability"),
    ("step 10 {'loss': tensor(nan, device='cuda:0')}", "numerical_instability"),
    ("loss is nan-free, no error", None),
    ("loss scale: 65536.0 | grad norm: inf", None),
    # a catalog's enum name is the whole name: cudaErrorInvalidDevicePointer is not cudaErrorInvalidDevice
    (
        "Search for `cudaErrorInvalidDevicePointer' in https://docs.nvidia.com/cuda/ for more information.",
        "cuda_error",
    ),
    (
        "Search for `cudaErrorInvalidDevice' in https://docs.nvidia.com/cuda/ for more information.",
        "config_error",
    ),
    # a 128+N status in any tool's words: the signal N decides; SIGTERM's 143 says nothing
    ("Process exited with exit code 137", "killed"),
    ("    Exit Code:    139", "segfault"),
    ("CalledProcessError: Command 'x' returned non-zero exit status 143.", "exception"),
    ("step 12 took 137 s, exit code 0", None),
    # the kernel's report of a fault signal that killed a process
    (
        "[ 8123.220567] python[40213]: segfault at 0 ip 00007f3a1c2b4e10 sp 00007ffd2b1a7c80 error 4 in libc.so.6",
        "segfault",
    ),
    # an ssh-based launcher that cannot reach a node
    ("ssh: connect to host gpu12 port 22: No route to host", "node_failure"),
    ("gpu12: ssh exited with exit code 255", "node_failure"),
    # NCCL's results: an invalid argument or usage is configuration, a system error NCCL's
    ("RuntimeError: NCCL Error 5: invalid usage", "config_error"),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid argument",
        "config_error",
    ),
    ("RuntimeError: NCCL error: unhandled system error", "nccl"),
    # srun: a step whose tasks cannot be laid out on its CPUs is the step's request (ESLURMD_CPU_LAYOUT_ERROR)
    (
        "srun: error: Task launch for StepId=12.0 failed on node gpu07: Unable to layout tasks on given cpus",
        "config_error",
    ),
    # torch's store-based barrier timeout, also as a title quotes it (first letter lower-cased)
    ("timed out initializing process group in store based barrier on rank: 3, for key: k", "rendezvous"),
    ("Waiting in store based barrier to initialize process group for rank: 0, key: k", None),
    # a CUDA error string whatever wraps it: 101 is a device index past the visible GPUs
    ("RuntimeError: cuda runtime error (101) : invalid device ordinal at Module.cpp:59", "config_error"),
    # a negative return code in any tool's words is the signal (Python's Popen.returncode); SIGHUP says nothing
    ("ERROR: error code -9", "killed"),
    ("worker 2 finished with return code: -11", "segfault"),
    ("Process finished with exit code -1", None),
    ("return code: -15", None),
    ("Exit code: -6", None),
    ("ERROR: exit code -1, error code -9", "killed"),
    # glog's CHECK of a CUDA call: code 2 is memory, any other the kernel's
    (
        "F0101 00:00:00.000 1 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
        "oom",
    ),
    (
        "F0101 00:00:00.000 1 math_functions.cu:79] Check failed: error == cudaSuccess (700 vs. 0)  an illegal "
        "memory access was encountered",
        "cuda_error",
    ),
    # a C++ std::logic_error ending the process is a program error; a runtime_error's what() must say why
    ("terminate called after throwing an instance of 'std::out_of_range'", "exception"),
    ("terminate called after throwing an instance of 'std::invalid_argument'", "exception"),
    ("terminate called after throwing an instance of 'std::length_error'", "exception"),
    ("terminate called after throwing an instance of 'std::logic_error'", "exception"),
    # anomaly mode's warning alone: the hunt for a NaN
    (
        "[W python_anomaly_mode.cpp:104] Warning: Error detected in MulBackward0. Traceback of forward call "
        "that caused the error:",
        "numerical_instability",
    ),
    # a shell's report of a child a signal took, glued to the progress bar it cut short (tqdm ends its line
    # with a carriage return), bash's and zsh's job report alike; zsh's own words for the other signals
    ("Loading checkpoint shards:  38%|###      | 3/8 [00:02<00:03,  1.28it/s]Killed", "killed"),
    (
        "Loading checkpoint shards:   0%|     | 0/3 [00:00<?, ?it/s][1]    26478 killed     python test.py",
        "killed",
    ),
    ("[2]  + 4242 segmentation fault (core dumped)  python x.py", "segfault"),
    ("zsh: bus error  python x.py", "oom"),
    ("the model was never Killed", None),
    ("Summary: [3] 1024 killed tokens filtered out", None),
    ("cleanup [1] 3 killed zombie workers, continuing", None),
    # amdgpu's shader error interrupt: err_type 1/2 (illegal instruction, memory violation) the kernel's
    # own fault, 0/3 (EDC) poisoned memory, the GPU's; with no err_type it says nothing
    (
        "[Tue Sep 10 09:37:12 2024] amdgpu: sq_intr: error, se 1, data 0x0, sh 0, priv 1, wave_id 1, simd_id 1, "
        "cu_id 11, err_type 2",
        "cuda_error",
    ),
    (
        "amdgpu: sq_intr: error, se 0, data 0x0, sh 0, priv 0, wave_id 3, simd_id 2, cu_id 4, err_type 3",
        "gpu_hardware",
    ),
    ("amdgpu: sq_intr: error, se 0, data 0x0, sh 0, priv 0, wave_id 3, simd_id 2, wgp_id 4", None),
    # gfx10/gfx11's form of the same interrupt names the field `type`
    (
        "amdgpu 0000:0a:00.0: sq_intr: error, detail 0x00000000, type 1, sh 1, priv 0, wave_id 0, simd_id 0, wgp_id 0",
        "cuda_error",
    ),
    (
        "amdgpu: sq_intr: error, detail 0x00000010, type 0, sh 0, priv 1, wave_id 2, simd_id 1, wgp_id 3",
        "gpu_hardware",
    ),
    # THC's `cuda runtime error (N) : <cudaGetErrorString>` (torch < 1.4): a build without this GPU's kernels
    (
        "RuntimeError: cuda runtime error (48) : no kernel image is available for execution on the device at "
        "/pytorch/aten/src/THC/generic/THCTensorMath.cu:14",
        "config_error",
    ),
    (
        "RuntimeError: cuda runtime error (8) : invalid device function at "
        "/pytorch/aten/src/THC/THCTensorCopy.cu:204",
        "config_error",
    ),
    # torch's state_dict size mismatch read by its tail too (a handler may wrap its head away)
    (
        "with shape torch.Size([8, 1280]) from checkpoint, the shape in current model is torch.Size([16, 1280]).",
        "config_error",
    ),
    # EIO after TensorFlow's `<file>; ` (tsl IOError), a fallback naming no node
    ("Unknown: dataset-train.tfrecord-00011-of00032; Input/output error", "filesystem"),
    ("OSError: [Errno 5] Input/output error: '/lustre/ckpt/iter_0001000'", "filesystem"),
    # glibc's double free by its head, whatever brackets follow
    ("double free or corruption（！prev）", "segfault"),
    # torch 1.8-1.10's watchdog line, with no SeqNum
    (
        "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) "
        "ran for 1801256 milliseconds before timing out.",
        "nccl_timeout",
    ),
    # argparse's other refusals (CPython Lib/argparse.py), whatever the program's name
    ("train.py: error: ambiguous option: --lr could match --lr-decay, --lr-warmup-iters", "config_error"),
    ("train.py: error: argument --fp16: not allowed with argument --bf16", "config_error"),
    ("train.py: error: one of the arguments --train-iters --train-samples is required", "config_error"),
    ("train.py: error: argument --bf16: ignored explicit argument 'true'", "config_error"),
    # bash unable to run the job's command: an interpreter gone is a cause; a denied command or redirect
    # explains a failure only where nothing else does (a cascade: the script may go on after a redirect)
    (
        "/var/spool/slurmd/job42/slurm_script: ./train.sh: /scratch/venv/bin/python3: bad interpreter: "
        "No such file or directory",
        "config_error",
    ),
    ("/var/spool/slurmd/job42/slurm_script: line 17: ./train.sh: Permission denied", "config_error"),
    # session 14: Slurm's memory-limit notice, not its accounting note; an oom-kill count of zero is nothing
    ("slurmstepd: error: Exceeded job memory limit", "oom"),
    ("srun: Exceeded job memory limit", "oom"),
    ("slurmstepd: error: Exceeded job memory limit at some point.", None),
    ("slurmstepd: debug:  oom-kill event count: 0", None),
    ("oom_kill 0", None),
    ("slurmstepd: debug:  oom-kill event count: 2", "oom"),
    # submitit at the walltime: its log line before the warning, and the error when it cannot requeue
    (
        "submitit INFO (2024-04-20 09:09:37,123) - Job has timed out. Ran 232 minutes out of requested 240 minutes.",
        "time_limit",
    ),
    (
        "submitit INFO (2024-04-20 09:09:37,123) - Job has not timed out. Ran 10 minutes out of requested 240 minutes.",
        None,
    ),
    (
        "submitit.core.utils.UncompletedJobError: Job not requeued because: timed-out too many times.",
        "time_limit",
    ),
    # CalledProcessError of a shell child: its 128+N status is the signal N's
    (
        "subprocess.CalledProcessError: Command '['bash', 'run.sh']' returned non-zero exit status 137.",
        "killed",
    ),
    (
        "subprocess.CalledProcessError: Command '['bash', 'run.sh']' returned non-zero exit status 139.",
        "segfault",
    ),
    (
        "subprocess.CalledProcessError: Command '['bash', 'run.sh']' returned non-zero exit status 1.",
        "exception",
    ),
]


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_a_line_reads_as_its_class(line: str, expected: str | None) -> None:
    """The line alone gives the listed class as the log's cause (None: no cause, a healthy line)."""
    cause = log_cause(classify_lines([line], PATTERNS))
    assert (cause.error_type if cause is not None else None) == expected, cause


_NCCL_CUDA_HEAD = [
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
    "1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
    "Last error:",
]

NCCL_QUOTED_CUDA_CASES = [
    # NCCL's `unhandled cuda error` only reports a CUDA call that failed; the CUDA error torch repeats after
    # `Last error:` (NCCL's CUDACHECK/CUCHECK text, checks.h and cudawrap.h) is the cause, by its own class
    (
        [*_NCCL_CUDA_HEAD, "Cuda failure 'peer access is not supported between these two devices'"],
        "cuda_error",
    ),
    ([*_NCCL_CUDA_HEAD, "Cuda failure 1 'invalid argument'"], "cuda_error"),
    ([*_NCCL_CUDA_HEAD, "Cuda failure 'out of memory'"], "oom"),
    ([*_NCCL_CUDA_HEAD, "Cuda failure 'invalid device ordinal'"], "config_error"),
    ([*_NCCL_CUDA_HEAD, "Cuda failure 'uncorrectable ECC error encountered'"], "gpu_hardware"),
    (
        ["[rank3]: " + line for line in _NCCL_CUDA_HEAD] + ["[rank3]: Cuda failure 'unknown error'"],
        "cuda_error",
    ),
    # XLA's quote of NCCL's last warning
    (
        [
            "NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error (run "
            "with NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry (may be unrelated) "
            "'Cuda failure 'operation not supported''."
        ],
        "cuda_error",
    ),
    # no CUDA error named: the NCCL result stays the cause
    (_NCCL_CUDA_HEAD, "nccl"),
    # NCCL's CUDACHECKIGNORE logs a failed call it goes on without at INFO: no cause, and not the NCCL error's
    (
        [
            "node1:2104:2391 [0] NCCL INFO Cuda failure 'peer access is not supported between these two "
            "devices'"
        ],
        None,
    ),
    (
        [
            "node1:2104:2391 [0] NCCL INFO Cuda failure 'operation not supported'",
            "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled cuda "
            "error, NCCL version 2.7.8",
        ],
        "nccl",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), NCCL_QUOTED_CUDA_CASES)
def test_a_cuda_error_nccl_quotes_is_the_cause_of_its_nccl_error(
    lines: list[str], expected: str | None
) -> None:
    """The CUDA failure NCCL names after `Last error:` gives the class; NCCL's INFO twin never does."""
    cause = log_cause(classify_lines(lines, PATTERNS))
    assert (cause.error_type if cause is not None else None) == expected, cause


FALLBACK_CASES = [
    # a fatal shape is the cause only when nothing else is: a peer's watchdog timeout (a cascade) wins
    (
        [
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
            "Aborted (core dumped)",
        ],
        "nccl_timeout",
    ),
    # a communicator aborted before torchrun's `exitcode: 1` report stays an NCCL failure, not a program error
    (
        [
            "RuntimeError: NCCL communicator was aborted on rank 1.",
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 12) of "
            "binary: /usr/bin/python",
        ],
        "nccl",
    ),
    # a negative return code is a fatal shape: a peer's timeout, or a raised exception, is the cause before it
    (
        [
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
            "worker 0 exited with exit code -9",
        ],
        "nccl_timeout",
    ),
    (["ValueError: bad shape", "worker 0 exited with exit code -11"], "exception"),
    # a rank's death reported before the peers' timeout is the cause; the same report after it is the teardown's
    (
        [
            "worker 3 exited with exit code 139",
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        ],
        "segfault",
    ),
    # a bus error is memory at memory's rank: a native crash after it does not outrank it
    (
        [
            "slurm_script: line 12:  4567 Bus error (core dumped) python train.py",
            "Segmentation fault (core dumped)",
        ],
        "oom",
    ),
    # a decided fatal shape is not lifted by its class above a cascade that came first
    (
        [
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
            "worker 0 exited with exit code 139",
        ],
        "nccl_timeout",
    ),
    # anomaly mode's warning ranks under every other cascade: a collective that failed inside backward
    (
        [
            "[W python_anomaly_mode.cpp:104] Warning: Error detected in _ReduceFromModelParallelRegionBackward. "
            "Traceback of forward call that caused the error:",
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
            "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
        ],
        "nccl_timeout",
    ),
    # anomaly mode's warning is a cascade: the error raised after it is the cause
    (
        [
            "UserWarning: Error detected in AddBackward0. Traceback of forward call that caused the error:",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ],
        "oom",
    ),
    # ... and a raised exception (a root) wins over an abort or a signal after it
    (["RuntimeError: the thing went wrong", "Aborted (core dumped)"], "exception"),
    (["ValueError: bad shape", "worker 0 killed by signal 9"], "exception"),
]


# A set-up line the job script may survive (bash's denied redirect, Lmod's unknown module, conda's missing
# environment) is a configuration cascade: a failure of the training itself, read by a root, is the cause.
SURVIVABLE_SETUP_CASES = [
    (
        [
            "/var/spool/slurmd/job42/slurm_script: line 3: /proc/sys/vm/drop_caches: Permission denied",
            "NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
        ],
        "nccl",
    ),
    (
        [
            'Lmod has detected the following error:  The following module(s) are unknown: "xpmem"',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ],
        "oom",
    ),
    (["EnvironmentNameNotFound: Could not find conda environment: megatron"], "config_error"),
]


@pytest.mark.parametrize(("lines", "expected"), SURVIVABLE_SETUP_CASES)
def test_a_survivable_setup_line_never_hides_a_cause(lines: list[str], expected: str) -> None:
    """A set-up cascade explains a failure only where no root does."""
    cause = log_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and cause.error_type == expected, cause


SILENT_DEATH_CASES = [
    # DeepSpeed's launcher stopping the other workers with no line saying why a worker ended: it died silently
    (["[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6293"], "killed"),
    # ... its own report of the worker's status, or the worker's error, says more
    (
        [
            "[2023-07-10 04:26:05,876] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 94984",
            "[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] ['python3', '-u', 'train.py'] exits with return code = -11",
        ],
        "segfault",
    ),
    (["RuntimeError: CUDA error: out of memory", "Killing subprocess 31867"], "oom"),
]


@pytest.mark.parametrize(("lines", "expected"), SILENT_DEATH_CASES)
def test_a_launcher_teardown_with_no_cause_is_a_silent_death(lines: list[str], expected: str) -> None:
    """A launcher killing its other workers shows a worker failed; a cause line in view says how."""
    cause = log_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and cause.error_type == expected, cause


@pytest.mark.parametrize(("lines", "expected"), FALLBACK_CASES)
def test_a_fatal_shape_never_hides_a_cause(lines: list[str], expected: str) -> None:
    """The fatal shapes are the weakest reading: any root, and any other cascade, is the cause before them."""
    cause = log_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and cause.error_type == expected, cause


HOROVOD_STALL = (
    "[2021-02-02 21:19:07.345988: W horovod/common/stall_inspector.cc:105] One or more tensors were submitted to be "
    "reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 "
    "seconds. This may indicate that different ranks are trying to submit different tensors or that only subset "
    "of ranks is submitting tensors, which will cause deadlock. "
)


def test_a_horovod_stall_is_a_hang_only_when_nothing_else_explains_the_end() -> None:
    """Horovod's stall inspector is the waiting ranks' report (a cascade, like a watchdog's): alone it is the
    hang's cause; a rank's own error or a kill beside it is the cause before it. It does not shorten the
    progress clock: a rank-0-only evaluation stalls the others for minutes and recovers."""
    signals = classify_lines([HOROVOD_STALL], PATTERNS)
    assert [(s.role, s.warns_of_hang) for s in signals] == [("cascade", False)]
    cause = log_cause(signals)
    assert cause is not None and cause.error_type == "hang", cause
    for own, expected in (
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
        ("ValueError: bad shape", "exception"),
        ("srun: error: n1: task 3: Killed", "killed"),
    ):
        cause = log_cause(classify_lines([HOROVOD_STALL, own], PATTERNS))
        assert cause is not None and cause.error_type == expected, (own, cause)


OS_ENVIRON_FRAME = '  File "/usr/lib/python3.10/os.py", line 680, in __getitem__'


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # os.environ[...] of a variable that is not set: configuration, whichever variable
        ([OS_ENVIRON_FRAME, "    raise KeyError(key) from None", "KeyError: 'RANK'"], "config_error"),
        (
            [
                f"[rank1]:{OS_ENVIRON_FRAME}",
                "[rank1]:     raise KeyError(key) from None",
                "[rank1]: KeyError: 'HF_TOKEN'",
            ],
            "config_error",
        ),
        # any other KeyError is the program's own: an exception
        (['  File "/x/train.py", line 5, in main', "    batch[k]", "KeyError: 'RANK'"], "exception"),
        (["KeyError: 'RANK'"], "exception"),
        # the frame too far above (another traceback's): not this KeyError's
        (
            [OS_ENVIRON_FRAME, "    raise KeyError(key) from None", "x", "y", "z", "KeyError: 'labels'"],
            "exception",
        ),
    ],
)
def test_a_missing_environment_variable_is_configuration(lines: list[str], expected: str) -> None:
    """CPython's os.environ turns a missing variable into `raise KeyError(key) from None` in os.py's
    `__getitem__` (Lib/os.py _Environ): that KeyError is the job's environment, the same on every attempt."""
    cause = log_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and cause.error_type == expected
