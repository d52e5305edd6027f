"""What a raised exception says about a failure: its TYPE first, its message second. No I/O.

A traceback's last line (`FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'`)
names the exception's class before its message. The class is the emitter's own classification of the
failure: Python, torch and the configuration libraries raise `FileNotFoundError`, `ModuleNotFoundError`,
`omegaconf.errors.MissingMandatoryValue` or `torch.OutOfMemoryError` for one kind of failure each, in
whatever words the message then uses. So a line is read by its class through the tables below, and only
a class that says nothing by itself (`RuntimeError`, `ValueError`, `OSError`, `AssertionError`, ...) is
read by its message: an errno (`[Errno 12]`, Python's errno names), a signal (`<Signals.SIGKILL: 9>`,
subprocess), non-finite numbers (`nan`, `inf`), memory words, a missing checkpoint.

This is what lets a line nobody quoted be read right: the next thread's `FileNotFoundError` names
another file, but it is the same class. The readers are used for a Python exception's last line
(base.yaml python_exception, `decide: exception_message`), a DataLoader worker's re-raised exception
(`Caught <Name> in DataLoader worker process N`) and a C++ exception that ended a process (`terminate
called after throwing an instance of 'std::bad_alloc'`, with torch's c10 classes).

Sources: the Python 3.12 built-in exception hierarchy (docs.python.org/3/library/exceptions.html) and
its errno module (Linux values); pytorch/pytorch torch/__init__.py, torch/cuda/__init__.py and
c10/util/Exception.h (OutOfMemoryError, AcceleratorError, DistBackendError, DistStoreError,
DistNetworkError), torch/linalg (LinAlgError); omegaconf 2.3 omegaconf/errors.py; hydra 1.3
hydra/errors.py; PyYAML 6 yaml/{scanner,parser,composer,constructor}.py; huggingface_hub 0.2x
huggingface_hub/errors.py; safetensors (SafetensorError); pydantic 2 and jsonschema (ValidationError);
tensorflow/tensorflow tensorflow/python/framework/errors_impl.py (tf.errors, TF 2.x); serde-rs/json 1.x
src/error.rs and huggingface/tokenizers bindings/python/src/error.rs (a parse error raised as `Exception`).
"""

from __future__ import annotations

import errno
import re
import signal

from oellm_autoexp.core.classify.exit_reports import SHELL_SIGNAL_BASE, is_checkpoint_missing, signal_class

GENERIC = "exception"  # a raised exception whose class and message say nothing more

# By the class's own name (the last part of a dotted name). Only classes raised for one kind of failure
# are here; the catch-all ones (RuntimeError, ValueError, OSError, AssertionError, KeyError, TypeError,
# AttributeError, NotImplementedError, ...) are read by their message.
EXCEPTION_CLASS: dict[str, str] = {
    # The same on every retry: a path, a module, an argument or a config file that is wrong.
    # builtins: OSError's subclasses for a path, and a module the environment lacks
    "FileNotFoundError": "config_error",
    "NotADirectoryError": "config_error",
    "IsADirectoryError": "config_error",
    "PermissionError": "config_error",
    "FileExistsError": "config_error",
    "ModuleNotFoundError": "config_error",
    "ImportError": "config_error",
    # TensorFlow's status classes (tensorflow/python/framework/errors_impl.py, tf.errors): NOT_FOUND "a requested
    # entity (e.g., a file or directory) was not found", PERMISSION_DENIED, ALREADY_EXISTS; the path it names is
    # the same on every retry, like OSError's subclasses above
    "NotFoundError": "config_error",
    "PermissionDeniedError": "config_error",
    "AlreadyExistsError": "config_error",
    # argparse
    "ArgumentError": "config_error",
    "ArgumentTypeError": "config_error",
    # a config file that does not parse (PyYAML, json, tomllib) or validate (pydantic, jsonschema, omegaconf)
    "ScannerError": "config_error",
    "ParserError": "config_error",
    "ComposerError": "config_error",
    "ConstructorError": "config_error",
    "JSONDecodeError": "config_error",
    "TOMLDecodeError": "config_error",
    "ValidationError": "config_error",
    # omegaconf.errors: a key or value the config does not have or does not accept
    "MissingMandatoryValue": "config_error",
    "ConfigAttributeError": "config_error",
    "ConfigKeyError": "config_error",
    "ConfigTypeError": "config_error",
    "ConfigValueError": "config_error",
    "ConfigIndexError": "config_error",
    "KeyValidationError": "config_error",
    "ReadonlyConfigError": "config_error",
    "UnsupportedValueType": "config_error",
    "UnsupportedInterpolationType": "config_error",
    "InterpolationResolutionError": "config_error",
    "InterpolationKeyError": "config_error",
    "InterpolationToMissingValueError": "config_error",
    "GrammarParseError": "config_error",
    # hydra.errors: the config could not be composed, a group option is missing, an override is malformed
    "ConfigCompositionException": "config_error",
    "MissingConfigException": "config_error",
    "OverrideParseException": "config_error",
    # huggingface_hub.errors: a model, revision or file that is not there (or not allowed, or not cached offline)
    "RepositoryNotFoundError": "config_error",
    "GatedRepoError": "config_error",
    "RevisionNotFoundError": "config_error",
    "EntryNotFoundError": "config_error",
    "LocalEntryNotFoundError": "config_error",
    "HFValidationError": "config_error",
    # huggingface/datasets src/datasets/load.py: a dataset id the Hub does not have, or not for this token
    # (404 and 401 both; an unreachable Hub is a ConnectionError instead)
    "DatasetNotFoundError": "config_error",
    # a trainer's own word for a setting or an environment it cannot run with: Lightning's
    # MisconfigurationException ("used to inform users of misuse with Lightning",
    # lightning/fabric/utilities/exceptions.py), DeepSpeed's DeepSpeedConfigError (runtime/config.py) and
    # its op builder's MissingCUDAException (no CUDA_HOME, no nvcc) and CUDAMismatchException (the toolkit
    # is not the one torch was built with; op_builder/builder.py); its elastic config's own
    # ElasticityConfigError (deepspeed/elasticity/config.py, raised by runtime/config.py for a
    # model-parallel size or GPUs per node below 1; DeepSpeed edaa72212)
    "MisconfigurationException": "config_error",
    "DeepSpeedConfigError": "config_error",
    "ElasticityConfigError": "config_error",
    "MissingCUDAException": "config_error",
    "CUDAMismatchException": "config_error",
    # a checkpoint file that cannot be read as one (pickle, torch's zip container, safetensors)
    "UnpicklingError": "config_error",
    "BadZipFile": "config_error",
    "SafetensorError": "config_error",
    # memory: Python's, numpy's, torch's (CUDA/accelerator allocator, >= 1.13), TensorFlow's
    "MemoryError": "oom",
    "_ArrayMemoryError": "oom",
    "OutOfMemoryError": "oom",
    "ResourceExhaustedError": "oom",
    # numbers: numpy's seterr(all='raise') and fairseq's loss scaler raise FloatingPointError; a
    # factorization that fails (not positive-definite, singular) on ill-conditioned or non-finite input
    "FloatingPointError": "numerical_instability",
    "LinAlgError": "numerical_instability",
    "_LinAlgError": "numerical_instability",
    # torch.distributed: the backend's collective failed (NCCL, gloo), the store or its socket did
    "DistBackendError": "nccl",
    "DistStoreError": "rendezvous",
    "DistNetworkError": "rendezvous",
    # torch >= 2.8 raises CUDA/HIP errors as AcceleratorError (catalogs/cuda_hip.yaml reads the message)
    "AcceleratorError": "cuda_error",
    "CudaError": "cuda_error",
}

# A C++ exception that ended a process (`terminate called after throwing an instance of '<type>'`): the
# standard library's and torch's (c10/util/Exception.h) classes that name one kind of failure. Not
# c10::DistBackendError: the NCCL watchdog throws it for a peer's collective timeout too (a cascade,
# whose own line below says so), so as a root it would hide the rank that failed first.
CPP_EXCEPTION_CLASS: dict[str, str] = {
    "std::bad_alloc": "oom",
    "c10::OutOfMemoryError": "oom",
    "c10::AcceleratorError": "cuda_error",
    "std::filesystem::__cxx11::filesystem_error": "config_error",
    "std::filesystem::filesystem_error": "config_error",
    # std::logic_error and the standard's subclasses of it: "errors that are a consequence of faulty
    # logic within the program" (the C++ standard, [std.exceptions]), a bug in the job's own code
    "std::logic_error": "exception",
    "std::out_of_range": "exception",
    "std::invalid_argument": "exception",
    "std::length_error": "exception",
    "std::domain_error": "exception",
}

# An OSError's `[Errno N]` by its errno name (Python's errno module gives the platform's numbers).
ERRNO_CLASS: dict[str, str] = {
    "ENOENT": "config_error",  # a path that is not there
    "ENOTDIR": "config_error",
    "EISDIR": "config_error",
    "EEXIST": "config_error",
    "EACCES": "config_error",  # permission denied
    "EPERM": "config_error",
    "EROFS": "config_error",  # a read-only file system
    "ENAMETOOLONG": "config_error",
    "ENOSPC": "config_error",  # no space left on device (base.yaml storage_full)
    "EDQUOT": "config_error",  # disk quota exceeded
    "EMFILE": "config_error",  # too many open files: the open-file limit (ulimit -n)
    "ENOMEM": "oom",  # cannot allocate memory
    "EADDRINUSE": "rendezvous",  # the rendezvous/store port is taken
}
_ERRNO_NUMBER: dict[int, str] = {
    getattr(errno, name): cls for name, cls in ERRNO_CLASS.items() if hasattr(errno, name)
}

_ERRNO = re.compile(r"\[Errno (?P<num>\d+)\]")
# subprocess.CalledProcessError (`died with <Signals.SIGKILL: 9>`), multiprocessing's `exitcode -9`
_SIGNAL_ENUM = re.compile(r"<Signals\.SIG\w+: (?P<num>\d+)>")
# CalledProcessError's other form (Lib/subprocess.py: `Command '...' returned non-zero exit status %d.`): a
# child that is a shell reports its own child's death by signal N as 128+N (137: SIGKILL), as a shell does
_CHILD_STATUS = re.compile(r"returned non-zero exit status (?P<code>\d+)")
# Non-finite numbers in a raised exception's message: `nan`/`inf` as words (torch prints tensors with
# them, anomaly mode says `returned nan values`), `non-finite`, `infinity`. Only ever read in a raised
# exception's message: the same words in a progress or warning line are not a failure.
_NON_FINITE = re.compile(
    r"(?<![\w.-])(?:nan|NaN|NAN|-?inf|-?Inf|-?INF|[Ii]nfinity)(?![\w-])|\bnon-finite\b|\bnot finite\b",
    re.ASCII,
)
# A parser's position in the text it could not read: serde_json's (and serde_yaml's) `<reason> at line N column
# M` (serde-rs/json src/error.rs, Display of Error: `"{} at line {} column {}"`; huggingface tokenizers raises
# it as a bare `Exception` when tokenizer.json does not parse, bindings/python/src/error.rs) and Python's json
# (`<reason>: line N column M (char K)`, Lib/json/decoder.py JSONDecodeError) under a catch-all class. A
# file that does not parse: the same on every retry, as JSONDecodeError itself (EXCEPTION_CLASS).
_PARSE_POSITION = re.compile(r"\bat line \d+ column \d+\s*$|: line \d+ column \d+ \(char \d+\)")
_MEMORY = re.compile(
    r"\bout of memory\b|\bCannot allocate memory\b|\bOOM when allocating\b|\bRESOURCE_EXHAUSTED\b|"
    r"\b(?:failed|unable) to allocate\b|\bnot enough memory\b",
    re.IGNORECASE,
)


# A catch-all class whose message states a rule the configuration broke (`tensor_model_parallel_size must be
# a divisor of ...`, `fp8 is not supported on this GPU`, `invalid choice: 'adamw8'`, `unknown model type
# 'gpt5'`): the checks a trainer runs on its arguments at set-up, the same on every retry. Not a message that
# only reports what it found (`Expected input batch_size (1324) to match target batch_size (0)`, `too many
# values to unpack`): that is the code's own bug, an exception.
# The second half holds the phrasings NVIDIA/Megatron-LM's argument checks use (megatron/training/arguments.py
# validate_args at d98e8a64dd, 167 assertions: `--use-torch-fsdp2 requires --ckpt-format torch_dist`, `... is
# only supported with ...`, `... are mutually exclusive`, `... cannot be used together`, `--batch-size argument is
# no longer valid, use --micro-batch-size instead`, `world size (12) is not divisible by ...`): an option that
# requires another, or that must (not) be used. Two that exclude each other may also say so `simultaneously`
# (Megatron's `--fp4-format and --fp8-format cannot be used simultaneously`, DeepSpeed edaa72212
# runtime/config.py `bfloat16 and fp16 modes cannot be simultaneously enabled`). A message that only names an option (`raising error since --throw
# was specified`) states no rule and is left to the class.
_CONFIG_RULE = re.compile(
    r"\b(?:must|should) be\b|\bis not supported\b|\bare not supported\b|\bnot supported (?:with|when|for|on|in|by)\b"
    r"|\bunsupported (?:value|option|argument|model|config|configuration|dtype|backend)\b"
    r"|\binvalid (?:value|choice|option|argument|configuration|config|combination|backend)\b"
    r"|\binvalid device (?:id|index|ordinal|type|string)\b"
    r"|\bunknown (?:model|argument|option|config|configuration|parameter|dataset)\b"
    r"|\bunrecognized (?:arguments?|option|model|config)\b"
    r"|\b(?:is|are) only supported (?:with|when|for|on|in|by)\b|\bonly supported with\b"
    r"|\b(?:is|are) mutually exclusive\b|\bcannot be (?:used|combined|enabled|specified) (?:together|at the same time|simultaneously)\b"
    r"|\bcannot be simultaneously (?:used|enabled|set|specified)\b"
    r"|\bcannot both be (?:specified|set|used)\b|\b(?:is|are) (?:not compatible|incompatible) with\b"
    r"|\bis no longer valid\b|\bis not divisible by\b|\bshould not be (?:used|specified|set)\b"
    r"|\bcan only specify one of\b"
    r"|\b(?:requires?|[Mm]ust use|[Dd]o not use|[Pp]lease use) (?:setting )?--[a-z]|\buse --[a-z][\w-]* instead\b",
    re.IGNORECASE,
)


# A catch-all class whose message says the INSTALLATION or the node cannot run the job, in the words the
# emitters use for it; the same on every retry until the environment is changed:
# - glibc's dynamic loader (dlerror, elf/dl-load.c `cannot open shared object file`, dl-lookup.c `undefined
#   symbol: %s`, dl-version.c "version `%s' not found (required by %s)", `wrong ELF class`; glibc 04e750e75b):
#   ctypes.CDLL and torch.ops.load_library raise it as OSError, an extension module as ImportError;
# - an environment variable the set-up needs and lacks (torch/distributed/rendezvous.py `environment variable
#   RANK expected, but not set`, torch/utils/cpp_extension.py `CUDA_HOME environment variable is not set`,
#   NVIDIA/Megatron-LM d98e8a64dd `... require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to
#   1`, core/hyper_comm_grid.py `WORLD_SIZE environment variable not set`);
# - two versions that do not go together (torch/utils/cpp_extension.py `The detected CUDA version (11.8)
#   mismatches the version that was used to compile PyTorch (12.1)`, DeepSpeed op_builder/builder.py
#   `Installed CUDA version 12.4 does not match the version torch was compiled with 12.1`, jax
#   jax/_src/lib/__init__.py `jaxlib version X is newer than and incompatible with jax version Y`);
# - a build or a GPU that lacks what the job asks for (torch/cuda/__init__.py `Torch not compiled with CUDA
#   enabled`, distributed_c10d.py `Distributed package doesn't have MPI built in`, TransformerEngine fp8.py
#   `Device compute capability 8.9 or higher required for FP8 execution`, torch/_inductor's `too old to be
#   supported by the triton GPU compiler ... CUDA Capability >= 8.0`, flash-attention flash_api.cpp
#   `FlashAttention only supports Ampere GPUs or newer`).
# Only a raised exception's message is read this way: torch's own warnings in these words (`... with CUDA
# capability sm_90 is not compatible with the current PyTorch installation`) are UserWarnings, never read.
_ENVIRONMENT_RULE = re.compile(
    r"\bcannot open shared object file\b|: undefined symbol: |\bversion `[^']+' not found \(required by "
    r"|\bwrong ELF class\b"
    r"|\benvironment variable\b[^\n]{0,60}?\b(?:expected, but not set|is not set|not set)\b"
    r"|\b(?:requires?|must) set(?:ting)? the environment variable\b"
    r"|\bversion\b[^\n]{0,80}?\b(?:mismatch(?:es|ed)?|does not match|do not match|incompatible with)\b"
    r"|\bnot compiled with\b|\b(?:doesn't|does not) have \w+ built in\b"
    r"|\bcompute capability\b|\bCUDA [Cc]apability\b|\btoo old to be supported\b|\bGPUs? or newer\b"
)


# PCCL's PCCLError names the library's result after the call that returned it (PrimeIntellect-ai/pccl
# a1c19882d3b5 python/framework/pccl/_pccl.py: `<function> failed with error: <Result name>: <Result name>`).
# MASTER_CONNECTION_FAILED: pcclConnect or pcclUpdateTopology could not reach or keep the master, PCCL's
# rendezvous server (pccl.cpp), so the peers never met. Raised and not caught, it ends the run.
_PCCL_MASTER_UNREACHED = re.compile(r"\bfailed with error: MASTER_CONNECTION_FAILED\b")


def exception_class(name: str) -> str | None:
    """The class a raised exception's class name names by itself (dotted or not), or None."""
    return EXCEPTION_CLASS.get(name.rsplit(".", 1)[-1])


def message_class(message: str) -> str | None:
    """What a raised exception's message says by itself, or None.

    In this order: a missing checkpoint (configuration), an errno, a signal that ended a child
    process (or a shell child's 128+N status), memory words, a parser's position in a file it could
    not read (configuration), non-finite numbers, a configuration rule the message states or an
    installation or node that cannot run the job, PCCL's master out of reach (rendezvous).
    """
    if is_checkpoint_missing(message):
        return "config_error"
    m = _ERRNO.search(message)
    if m is not None and (found := _ERRNO_NUMBER.get(int(m.group("num")))) is not None:
        return found
    m = _SIGNAL_ENUM.search(message)
    if m is not None and int(m.group("num")) in _KNOWN_SIGNALS:
        return signal_class(int(m.group("num")))
    m = _CHILD_STATUS.search(message)
    if m is not None and (found := signal_class(int(m.group("code")) - SHELL_SIGNAL_BASE)) is not None:
        return found
    if _MEMORY.search(message) is not None:
        return "oom"
    if _PARSE_POSITION.search(message) is not None:
        return "config_error"
    if _NON_FINITE.search(message) is not None:
        return "numerical_instability"
    if _CONFIG_RULE.search(message) is not None or _ENVIRONMENT_RULE.search(message) is not None:
        return "config_error"
    if _PCCL_MASTER_UNREACHED.search(message) is not None:
        return "rendezvous"
    return None


_KNOWN_SIGNALS = {s.value for s in signal.Signals}


def raised_class(name: str, message: str) -> str:
    """The class of a raised exception: its class name's, else its message's, else `exception`."""
    return exception_class(name) or message_class(message) or GENERIC


def cpp_exception_class(type_name: str) -> str | None:
    """The class of a C++ exception that ended a process, by its type (None: the message must say)."""
    return CPP_EXCEPTION_CLASS.get(type_name.strip())


# --------------------------------------------------------------------------- deciders (core/classify/blocks.py)

# A traceback's last line: the class's dotted name, then `: message` (or nothing). The last part of the
# name may start with `_` (numpy's `_ArrayMemoryError`, torch's `torch._C._LinAlgError`).
_RAISED = re.compile(r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::\s*(?P<message>.*))?$")


def decide_exception_message(line: str) -> str:
    """The class of a raised exception's last line: by its class, else by its message, else `exception`."""
    m = _RAISED.match(line.strip())
    if m is None:
        return GENERIC
    return raised_class(m.group("name"), m.group("message") or "")


# torch/_utils.py ExceptionWrapper.reraise: `Caught <Name> <where>.` names the exception a DataLoader
# worker (`in DataLoader worker process 3`), a DataParallel replica (`in replica 1 on device 1`) or the
# pin-memory thread (`in pin memory thread for device 0`) raised; its class decides where it says enough
# (the original traceback below it, when in view, says more).
_WORKER_RERAISE = re.compile(
    r"Caught (?P<name>[A-Za-z_][\w.]*) in (?:DataLoader worker process|replica \d+ on device|pin memory thread)"
)


def decide_worker_exception(line: str) -> str | None:
    """The class of torch's `Caught <Name> in DataLoader worker process N.` (or a replica, the pin-memory
    thread): by the name, else `exception`."""
    m = _WORKER_RERAISE.search(line)
    if m is None:
        return None
    return exception_class(m.group("name")) or GENERIC


# libstdc++'s verbose terminate handler: `terminate called after throwing an instance of '<type>'`,
# then `  what():  <message>` on the next line (core/classify/blocks.py reads that one by its words).
_CPP_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")


def decide_cpp_exception(line: str) -> str | None:
    """The class of a C++ exception that ended the process, by its type; None when the type says nothing."""
    m = _CPP_TERMINATE.search(line)
    return cpp_exception_class(m.group("type")) if m is not None else None


_WHAT = re.compile(r"^\s*what\(\):\s*(?P<message>.*)$")


def decide_cpp_what(line: str) -> str | None:
    """The class of a terminated C++ exception's `what():` line, by its message (None: it says nothing)."""
    m = _WHAT.match(line)
    if m is None:
        return None
    message = m.group("message")
    if message.strip() == "std::bad_alloc":
        return "oom"
    return message_class(message)


# torch elastic's error file as the agent logs it (torch/distributed/elastic/multiprocessing/errors/
# error_handler.py: json.dumps of {"message": {"message": "<Name>: <message>", "extraInfo": ...}}): the
# failed rank's own exception, one field of the block.
_ERROR_FILE_MESSAGE = re.compile(r'"message": "(?P<raised>[^"]*)"')


def decide_error_file_message(line: str) -> str | None:
    """The class of an elastic error file's `"message": "<Name>: <message>"` field, as a raised exception."""
    m = _ERROR_FILE_MESSAGE.search(line)
    return decide_exception_message(m.group("raised")) if m is not None else None
