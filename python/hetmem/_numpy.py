# SPDX-License-Identifier: BSD-3-Clause
"""numpy, imported on first use.

`hetmem` builds every verb's parser at start-up, so every module a verb
imports is loaded then. numpy (and the OpenBLAS threads it starts, which
spin for a while) belongs to the verbs that compute, not to the parent of
the user's command in `hetmem run`. The modules that compute take `np` from
here: their imports stay at the top, and numpy loads when a function first
uses it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


class _OnFirstUse:
    """A module's attributes, loading the module on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        # Lazy: CLI start-up time (see the module docstring).
        value = getattr(importlib.import_module(self._name), attr)
        setattr(self, attr, value)  # later reads find it without this call
        return value


if TYPE_CHECKING:
    import numpy as np
else:
    np = _OnFirstUse("numpy")

__all__ = ["np"]
