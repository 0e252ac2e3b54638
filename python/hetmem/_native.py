# SPDX-License-Identifier: BSD-3-Clause
"""ctypes binding to libhetmem.so (the runtime library, not the interposer).

The library is found, in order, in $HETMEM_LIBDIR (a development build tree)
and in this package's _lib folder (where `pip install .` puts it).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
from pathlib import Path
from typing import Any

from hetmem.errors import NativeError

_PKG_LIB = Path(__file__).resolve().parent / "_lib"


def library_dir() -> Path:
    """Folder holding libhetmem.so and the preload library."""
    env = os.environ.get("HETMEM_LIBDIR")
    if env:
        return Path(env)
    return _PKG_LIB


@functools.lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    path = library_dir() / "libhetmem.so"
    if not path.exists():
        raise NativeError(f"libhetmem not found at {path}; reinstall hetmem (pip install .)")
    so = ctypes.CDLL(str(path))
    c_p = ctypes.c_void_p
    so.hm_version.restype = ctypes.c_char_p
    so.hm_strerror.restype = ctypes.c_char_p
    so.hm_strerror.argtypes = [ctypes.c_int]
    so.hm_free.argtypes = [c_p]
    so.hm_ctx_new.argtypes = [ctypes.POINTER(c_p), ctypes.c_char_p]
    so.hm_ctx_free.argtypes = [c_p]
    so.hm_ctx_last_error.argtypes = [c_p]
    so.hm_ctx_last_error.restype = ctypes.c_char_p
    so.hm_option_set.argtypes = [c_p, ctypes.c_char_p, ctypes.c_char_p]
    so.hm_options_json.argtypes = [c_p, ctypes.POINTER(c_p)]
    so.hm_parse_size.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
    _declare_sections(so)
    _declare_pager(so)
    return so


def _declare_sections(so: ctypes.CDLL) -> None:
    """Signatures of later API sections, declared only where the library has them."""
    c_p = ctypes.c_void_p
    json_fns = {
        # name: extra argument types between ctx and the char** out
        "hm_tiers_json": [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t],
        "hm_probe_json": [ctypes.c_char_p],
        "hm_mempolicy_json": [ctypes.c_char_p, ctypes.c_char_p],
    }
    for name, extra in json_fns.items():
        fn = getattr(so, name, None)
        if fn is not None:
            fn.argtypes = [c_p, *extra, ctypes.POINTER(c_p)]
            fn.restype = ctypes.c_int
    if getattr(so, "hm_mempolicy_apply", None) is not None:
        so.hm_mempolicy_apply.argtypes = [c_p, ctypes.c_char_p, ctypes.c_char_p]
        so.hm_mempolicy_apply.restype = ctypes.c_int


class PagerConfig(ctypes.Structure):
    """hm_pager_config_t (hetmem.h, HM_PAGER_CONFIG_VERSION 1)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("dram_budget", ctypes.c_uint64),
        ("backing_dir", ctypes.c_char_p),
        ("fetch_unit", ctypes.c_uint64),
        ("prefetch", ctypes.c_int),
        ("io_depth", ctypes.c_uint32),
        ("handler_threads", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


def _declare_pager(so: ctypes.CDLL) -> None:
    """hm_pager_* signatures, where the library has the pager."""
    c_p = ctypes.c_void_p
    if getattr(so, "hm_pager_open", None) is None:
        return
    so.hm_pager_config_default.argtypes = [c_p, ctypes.POINTER(PagerConfig)]
    so.hm_pager_config_default.restype = None
    so.hm_pager_open.argtypes = [c_p, ctypes.POINTER(PagerConfig), ctypes.POINTER(c_p)]
    so.hm_pager_close.argtypes = [c_p]
    so.hm_pager_map.argtypes = [c_p, ctypes.c_size_t, ctypes.POINTER(c_p)]
    so.hm_pager_unmap.argtypes = [c_p, c_p, ctypes.c_size_t]
    so.hm_pager_stats_json.argtypes = [c_p, ctypes.POINTER(c_p)]


def has_pager() -> bool:
    return getattr(lib(), "hm_pager_open", None) is not None


def strerror(err: int) -> str:
    return lib().hm_strerror(err).decode()


def parse_size_native(text: str) -> int:
    out = ctypes.c_uint64()
    rc = lib().hm_parse_size(text.encode(), ctypes.byref(out))
    if rc:
        raise NativeError(f"'{text}': {strerror(rc)}", rc)
    return out.value


class Context:
    """An hm_ctx_t: options plus the filesystem root for /sys and /proc."""

    def __init__(self, fsroot: str | None = None) -> None:
        self._h = ctypes.c_void_p()  # close() is safe however far this got
        self._so = lib()
        handle = ctypes.c_void_p()
        rc = self._so.hm_ctx_new(ctypes.byref(handle), fsroot.encode() if fsroot else None)
        self._h = handle
        if rc:
            msg = self.last_error() or strerror(rc)
            self.close()
            raise NativeError(msg, rc)

    def close(self) -> None:
        # detach before freeing: a signal handler that raises between the
        # free and the reset would otherwise leave a dangling handle that
        # __del__ frees a second time
        h, self._h = self._h, ctypes.c_void_p()
        if h:
            self._so.hm_ctx_free(h)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def handle(self) -> ctypes.c_void_p:
        return self._h

    def last_error(self) -> str:
        if not self._h:
            return ""
        return (self._so.hm_ctx_last_error(self._h) or b"").decode(errors="replace")

    def check(self, rc: int) -> None:
        """Raises NativeError with the context's message if rc is an error."""
        if rc < 0:
            raise NativeError(self.last_error() or strerror(rc), rc)

    def set_option(self, name: str, value: str) -> None:
        self.check(self._so.hm_option_set(self._h, name.encode(), value.encode()))

    def call(self, fn_name: str, *args: Any) -> int:
        """fn(ctx, *args)'s return code, unchecked (0 or a negative errno):
        for callers that must not raise (a preexec function)."""
        return int(getattr(self._so, fn_name)(self._h, *args))

    def call_json(self, fn_name: str, *args: Any) -> Any:
        """Calls an `int fn(ctx, ..., char **out)` API and parses its JSON."""
        fn = getattr(self._so, fn_name)
        out = ctypes.c_void_p()
        self.check(fn(self._h, *args, ctypes.byref(out)))
        try:
            text = ctypes.string_at(out.value).decode()
        finally:
            self._so.hm_free(out)
        return json.loads(text)

    def options(self) -> list[dict[str, str]]:
        return self.call_json("hm_options_json")

    def option(self, name: str) -> str:
        """The effective text value of one option (from the one table)."""
        return next(o["value"] for o in self.options() if o["name"] == name)

    def default_storage_dir(self) -> str:
        """The storage tier the runtime uses when none is given: the `storage`
        option (HETMEM_STORAGE), else $TMPDIR, else /var/tmp."""
        return self.option("storage") or os.environ.get("TMPDIR") or "/var/tmp"
