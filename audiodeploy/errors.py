"""The one root of audiodeploy's errors.

Every error audiodeploy raises on purpose derives from :class:`AudiodeployError`: its message is a complete
one-line answer to the user (what is wrong, and what to do), so the command line prints it as it is, with
:attr:`~AudiodeployError.exit_status`, and no traceback. Each also keeps the built-in base a caller would expect
(``ValueError`` for bad input, ``RuntimeError`` for a failed run), so ``except ValueError`` still catches bad input.

Imports nothing: ``audiodeploy list`` and ``--help`` stay instant.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["AudiodeployError"]


class AudiodeployError(Exception):
    """An error whose message is the whole answer to the user."""

    exit_status: ClassVar[int] = 2
    """The command line's exit status: 2, a mistake in what was asked or given (the default)."""
