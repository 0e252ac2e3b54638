# SPDX-License-Identifier: BSD-3-Clause
"""hetmem: heterogeneous-memory toolkit for HPC.

The native runtime (libhetmem) does discovery, measurement, paging and
placement; this package is the `hetmem` command and everything off the hot
paths: orchestration, advice, benchmarks and reports.

The public Python API is the names in `__all__`, documented in docs/api.md:

    import hetmem
    hetmem.parse_size("4G")                      # 4294967296
    hetmem.discover_tiers()["tiers"]             # the tiers, fastest first
    hetmem.run_command(["./app"], "cache", fast_budget="4G")

`import hetmem` stays light: each name is loaded on first use (PEP 562), so
importing the package loads neither numpy nor libhetmem, and never the
preload library (that is only ever LD_PRELOADed into a command).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    # sizes as users write them
    "parse_size": "hetmem.api",
    "format_size": "hetmem.api",
    "parse_budget": "hetmem.api",
    # the tiers
    "discover_tiers": "hetmem.api",
    "measure_tiers": "hetmem.api",
    "cached_measurements": "hetmem.api",
    # profiles and placement
    "load_profiles": "hetmem.api",
    "advise": "hetmem.api",
    "Advice": "hetmem.api",
    "load_placement": "hetmem.api",
    # running a command in a mode
    "run_command": "hetmem.api",
    # which mode, and how much faster (`hetmem recommend`)
    "recommend_mode": "hetmem.recommend.public",
    # the errors, one hierarchy
    "HetmemError": "hetmem.errors",
    "UsageError": "hetmem.errors",
    "SchemaError": "hetmem.errors",
    "NativeError": "hetmem.errors",
    "EnvironmentProblem": "hetmem.errors",
    "CommandNotFound": "hetmem.errors",
    "CommandNotExecutable": "hetmem.errors",
}

# literal, for tools that read it; tests/unit/test_api.py checks it is _PUBLIC's
__all__ = [
    "Advice",
    "CommandNotExecutable",
    "CommandNotFound",
    "EnvironmentProblem",
    "HetmemError",
    "NativeError",
    "SchemaError",
    "UsageError",
    "__version__",
    "advise",
    "cached_measurements",
    "discover_tiers",
    "format_size",
    "load_placement",
    "load_profiles",
    "measure_tiers",
    "parse_budget",
    "parse_size",
    "recommend_mode",
    "run_command",
]


def __getattr__(name: str) -> Any:
    """A public name, loaded on first use (the module docstring says why)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'hetmem' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads find it without this call
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
