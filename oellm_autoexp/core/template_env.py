"""The Jinja2 environment over the package's templates (core/templates/), shared by the sbatch
script (plan/render.py) and the HTML report (core/report/report_html.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jinja2

# Package data, loaded through the package's import machinery so that it works from a wheel.
TEMPLATE_PACKAGE = ("oellm_autoexp.core", "templates")


def template_environment(
    *, autoescape: bool, filters: Mapping[str, Callable[..., str]], keep_trailing_newline: bool = False
) -> jinja2.Environment:
    """A strict environment over the package's templates (core/templates/), with `filters`.

    Shared by the sbatch script (no escaping: shell text, quoted by its own filters) and the
    HTML report (autoescaped). An undefined name is an error, never an empty string.
    """
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(*TEMPLATE_PACKAGE),
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=keep_trailing_newline,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(filters)
    return env
