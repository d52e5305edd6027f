"""Build hook: ship the repository's `config/` inside the wheel as `oellm_autoexp/_shipped/`.

`config/` stays at the repository root, where people edit the shipped groups and where a
checkout or an editable install reads it in place (`shipped_config_dir()` falls back to it).
A wheel has no repository root, so `build_py` copies the tree into the built package, where
`importlib.resources` finds it. A copy rather than a `package-dir` mapping: a mapped package
has to be listed by hand next to `packages.find`, and would silently drop any new subpackage.
Everything else (metadata, dependencies, extras) is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED_SOURCE = Path(__file__).resolve().parent / "config"
SHIPPED_TARGET = ("oellm_autoexp", "_shipped")  # keep in step with oellm_autoexp/config/loader.py


class BuildPyWithShippedConfig(build_py):
    """The usual build_py, then a copy of `config/` into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads config/ in the checkout
        target = Path(self.build_lib, *SHIPPED_TARGET)
        shutil.copytree(
            SHIPPED_SOURCE, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


setup(cmdclass={"build_py": BuildPyWithShippedConfig})
