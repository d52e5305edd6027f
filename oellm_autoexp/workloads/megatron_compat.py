"""Where the megatron-core wheel and megatron.training's pretrain() disagree.

pretrain() runs `make -C <megatron/core/datasets>` on rank 0 to compile the C++ dataset
index helpers, and exits the job if make fails. The wheel ships those helpers already
compiled (`helpers_cpp.cpython-*.so`) but not the Makefile, so make always fails there.
Megatron finds the function at call time (`from megatron.core.datasets.utils import
compile_helpers` inside `_compile_dependencies`), so replacing it on its module is enough.
"""

from __future__ import annotations

import importlib


def use_prebuilt_dataset_helpers() -> None:
    """Make pretrain()'s "compile the dataset helpers" step load the wheel's compiled ones.

    If the compiled module is missing (a source checkout that was never built), Megatron's
    own compile step is kept, so `make` still runs where a Makefile exists.
    """
    from megatron.core.datasets import utils

    try:
        importlib.import_module("megatron.core.datasets.helpers_cpp")
    except ImportError:
        return
    utils.compile_helpers = _helpers_already_compiled


def _helpers_already_compiled() -> None:
    """Stands in for megatron.core.datasets.utils.compile_helpers: nothing to build."""
