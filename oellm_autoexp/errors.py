"""Errors that reach the user as one clear line and exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: a config file, a key, an argument.

    The message names the file, the key path and what was expected; the CLI
    prints it without a traceback and exits 2. Nothing is submitted.
    """
