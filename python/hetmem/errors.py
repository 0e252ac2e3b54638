# SPDX-License-Identifier: BSD-3-Clause
"""The one exception hierarchy of hetmem.

Every error a user can cause is a HetmemError; the CLI prints its message on
one line and exits with its exit_code (2), never with a traceback.
"""

from __future__ import annotations


def shown(text: str) -> str:
    """text as a one-line message quotes it: as written, or with its
    newlines and other unprintable characters escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


class HetmemError(Exception):
    """Base of every error hetmem reports to a user."""

    exit_code = 2


class UsageError(HetmemError):
    """A bad argument, option value or combination of them."""


class NativeError(HetmemError):
    """libhetmem returned a negative errno; the message is its own."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


class SchemaError(HetmemError):
    """A result, profile or placement file that is malformed or of another version."""


class EnvironmentProblem(HetmemError):
    """The machine lacks something a command needs (root, a tool, a kernel feature)."""


class CommandNotFound(HetmemError):
    """The command to run does not exist: exit 127, as a shell gives."""

    exit_code = 127


class CommandNotExecutable(HetmemError):
    """The command exists but cannot be executed: exit 126, as a shell gives."""

    exit_code = 126
