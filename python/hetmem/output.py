# SPDX-License-Identifier: BSD-3-Clause
"""Terminal output shared by the verbs: JSON, tables and progress."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from hetmem.errors import UsageError

_console: Console | None = None


# Output that goes to a file or a pipe (`hetmem profile show > sites.txt`,
# `| less`) is not cut to rich's 80 columns, which truncated site names in
# tables and folded one-line notes; COLUMNS, when set, still decides.
PIPE_WIDTH = 200


def _width(stream: Any) -> int | None:
    if "COLUMNS" in os.environ:
        return None
    try:
        return None if stream.isatty() else PIPE_WIDTH
    except (AttributeError, ValueError):
        return PIPE_WIDTH


def console() -> Console:
    global _console
    if _console is None:
        _console = Console(highlight=False, width=_width(sys.stdout))
    return _console


def err_console() -> Console:
    return Console(stderr=True, highlight=False, width=_width(sys.stderr))


def run_note(text: str) -> None:
    """A line on stderr that is `hetmem run`'s, not the command's (one
    write: it does not interleave with the command's output mid-line)."""
    os.write(2, f"hetmem run: note: {text}\n".encode())


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        t.add_column(col, justify="right" if numeric else "left")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console().print(t)


@contextmanager
def progress(enabled: bool = True) -> Iterator[Progress]:
    """A transient progress display on stderr (hidden with --json or when not a tty)."""
    p = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=err_console(),
        transient=True,
        disable=not enabled,
    )
    with p:
        yield p


def check_output_dir(path: str | os.PathLike[str], flag: str) -> None:
    """Refuses, before any work, an output file whose directory is missing
    or not writable (UsageError naming the option): the file is written
    when the work is done."""
    parent = Path(path).absolute().parent
    if not parent.is_dir():
        raise UsageError(f"{flag}: directory '{parent}' does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag}: directory '{parent}' is not writable")
    check_shared_dir(parent, flag)


def check_output_file(path: str | os.PathLike[str], flag: str) -> None:
    """Refuses, before any work, an output file that cannot be written: its
    directory missing, not writable or shared unsafely, or the path a folder."""
    check_output_dir(path, flag)
    if Path(path).is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name a file")


def check_shared_dir(path: str | os.PathLike[str], what: str) -> None:
    """Refuses a directory where hetmem would create files that every user
    may write without the sticky bit: there anyone can rename hetmem's files
    away and put symlinks in their place between two of its steps."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # the caller's own checks say what is wrong with it
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise UsageError(
            f"{what}: directory '{path}' is writable by every user and lacks the sticky bit, "
            f"so others could replace hetmem's files in it; run `chmod +t {path}` or choose "
            "another directory"
        )


def write_atomic(path: Path, text: str) -> None:
    """Writes text to path through a temporary file created exclusively in its
    directory (mkstemp: O_EXCL, so a symlink planted where the temporary file
    goes is never followed) and renamed into place, so that a symlink at path
    is replaced, not written through; UsageError when it cannot."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(f.fileno(), 0o666 & ~mask)  # as open() would have made it
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
