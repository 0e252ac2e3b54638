"""One module per `hetmem` verb; each defines a Command class (see hetmem.cli)."""

from __future__ import annotations

import os
from pathlib import Path

from hetmem.errors import UsageError
from hetmem.output import check_output_dir


def check_output_file(path: str | os.PathLike[str], flag: str) -> None:
    """Refuses, before any work, an output file that cannot be written: its
    directory missing or not writable, or the path a folder."""
    check_output_dir(path, flag)
    if Path(path).is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name a file")
