# SPDX-License-Identifier: BSD-3-Clause
"""Where hetmem keeps results between runs (probe results, calibrations).

Results live in $HETMEM_CACHE_DIR, else $XDG_CACHE_HOME/hetmem, else
~/.cache/hetmem, in files keyed by machine so that a home directory shared by
several machines (common on clusters) keeps each machine's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from hetmem.output import write_atomic


def cache_dir() -> Path:
    env = os.environ.get("HETMEM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "hetmem"


def cpu_models() -> list[str]:
    """The distinct 'model name' lines of /proc/cpuinfo, sorted (as read,
    newline included); empty where there is none (some ARM kernels)."""
    try:
        with open("/proc/cpuinfo") as f:
            return sorted({ln for ln in f if ln.startswith("model name")})
    except OSError:
        return []


def machine_key() -> str:
    """Host name plus a digest of what makes measurements differ between machines."""
    parts = [platform.node(), platform.machine(), str(os.cpu_count())]
    parts += cpu_models()
    try:
        parts += sorted(os.listdir("/sys/devices/system/node"))
    except OSError:
        pass
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return f"{platform.node() or 'host'}-{digest}"


def result_path(kind: str) -> Path:
    return cache_dir() / f"{kind}-{machine_key()}.json"


def load(kind: str) -> dict[str, Any] | None:
    """The cached result of this kind for this machine, or None."""
    path = result_path(kind)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save(kind: str, data: dict[str, Any]) -> Path:
    """Writes atomically (a reader never sees half a file)."""
    path = result_path(kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2))  # never through a link
    return path
