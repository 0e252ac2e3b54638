# SPDX-License-Identifier: BSD-3-Clause
"""TOML reading on every Python hetmem supports: the standard library's
tomllib from 3.11, its forerunner tomli (a dependency there) on 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib as _impl
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as _impl

loads = _impl.loads
TOMLDecodeError = _impl.TOMLDecodeError

__all__ = ["TOMLDecodeError", "loads"]
