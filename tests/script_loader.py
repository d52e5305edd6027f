"""Load one of the repository's scripts (scripts/...) as a module, for the tests of its functions."""

import importlib.util
import sys
from types import ModuleType

from tests.paths import REPO


def load_script(relative: str) -> ModuleType:
    """The script at `relative` (from the checkout's root), imported under its file's stem."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
