# SPDX-License-Identifier: BSD-3-Clause
"""Frames to source locations, through libhetmem's hm_symbolize (libdw).

Profiles record return addresses; the call that allocated is the
instruction before, so frames are looked up at offset - 1 (the same
convention as addr2line users and every unwinder's "pc - 1" rule).
Results are cached per module, one libdw session per module and batch.
"""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hetmem._native import Context, lib
from hetmem.errors import HetmemError, NativeError
from hetmem.placement.sitenames import INLINE_SEP


@dataclass(frozen=True)
class Location:
    """A frame's place: its function at file:line, and the functions the
    compiler inlined there (innermost first, each at the place in it of the
    call below it). Shown as 'inner at f:l <- ... <- function at f:l'."""

    function: str | None
    file: str | None
    line: int
    inlined: tuple[Location, ...] = ()

    def chain(self) -> list[Location]:
        """The frame as the functions a reader sees, innermost first."""
        return [*self.inlined, Location(self.function, self.file, self.line)]

    def __str__(self) -> str:
        if self.inlined:
            return INLINE_SEP.join(str(x) for x in self.chain())
        fn = self.function or "??"
        if self.file:
            return f"{fn} at {self.file}:{self.line}"
        return fn


_demangler: Any = None
_GFORTRAN_MODULE = re.compile(r"^__(\w+?)_MOD_(\w+)$")
_demangled: dict[str, str] = {}


def demangle(name: str) -> str:
    """A C++ symbol as people write it ("make_hot()" for "_Z8make_hotv"),
    through libstdc++'s own __cxa_demangle, and a gfortran module procedure
    as "work::make" (for "__work_MOD_make"); the name itself when it is not
    mangled or libstdc++ is not there."""
    global _demangler
    fortran = _GFORTRAN_MODULE.match(name)
    if fortran:  # gfortran's module procedures, as gdb shows them
        return f"{fortran.group(1)}::{fortran.group(2)}"
    if not name.startswith("_Z"):
        return name
    if name in _demangled:
        return _demangled[name]
    if _demangler is None:
        try:
            cxx = ctypes.CDLL("libstdc++.so.6")
            fn = cxx.__cxa_demangle
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_int)]  # fmt: skip
            fn.restype = ctypes.c_void_p
            libc = ctypes.CDLL(None)
            libc.free.argtypes = [ctypes.c_void_p]
            _demangler = (fn, libc.free)
        except (OSError, AttributeError):
            _demangler = False
    out = name
    if _demangler:
        fn, free = _demangler
        status = ctypes.c_int(-1)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if ptr:
            try:
                if status.value == 0:
                    out = ctypes.string_at(ptr).decode(errors="replace")
            finally:
                free(ptr)
    _demangled[name] = out
    return out


def _declare() -> ctypes.CDLL:
    so = lib()
    c_p = ctypes.c_void_p
    if not hasattr(so, "hm_symbolize"):
        raise NativeError("this libhetmem has no symbolizer (hm_symbolize); rebuild hetmem")
    so.hm_symbolize.argtypes = [
        c_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.c_size_t,
        ctypes.POINTER(c_p),
    ]
    so.hm_symbolize.restype = ctypes.c_int
    so.hm_module_build_id.argtypes = [c_p, ctypes.c_char_p, ctypes.POINTER(c_p)]
    so.hm_module_build_id.restype = ctypes.c_int
    return so


def _take(so: ctypes.CDLL, out: ctypes.c_void_p) -> str:
    try:
        return ctypes.string_at(out.value).decode(errors="replace")
    finally:
        so.hm_free(out)


def build_id(path: str) -> str:
    """GNU build-id of an ELF file as lower-case hex ("" if it has none)."""
    so = _declare()
    with Context() as ctx:
        out = ctypes.c_void_p()
        ctx.check(so.hm_module_build_id(ctx.handle, path.encode(), ctypes.byref(out)))
        return _take(so, out)


def symbolize_raw(path: str, build_id_hex: str, offsets: list[int]) -> dict[str, Any]:
    """hm_symbolize's JSON for exact offsets (no return-address adjustment)."""
    so = _declare()
    arr = (ctypes.c_uint64 * max(1, len(offsets)))(*offsets)
    with Context() as ctx:
        out = ctypes.c_void_p()
        ctx.check(
            so.hm_symbolize(
                ctx.handle,
                path.encode(),
                build_id_hex.encode(),
                arr,
                len(offsets),
                ctypes.byref(out),
            )
        )
        return json.loads(_take(so, out))


def _location(fr: dict[str, Any]) -> Location:
    """A frame of hm_symbolize's JSON, names demangled."""
    fn = fr.get("function")
    inl = tuple(
        Location(demangle(i["function"]) if i.get("function") else None, i.get("file"),
                 int(i.get("line") or 0))
        for i in fr.get("inlined") or ()
    )  # fmt: skip
    return Location(demangle(fn) if fn else None, fr.get("file"), int(fr.get("line", 0)), inl)


class Symbolizer:
    """Caches locations per (module key, offset); remembers failures per
    module so that a missing binary is reported once, not per frame."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], Location] = {}
        self.problems: dict[str, str] = {}

    def prefetch(self, frames: Iterable[tuple[str, str, str, int]]) -> None:
        """frames: (module key, path, build-id, return-address offset)."""
        todo: dict[str, tuple[str, str, list[int]]] = {}
        for key, path, bid, off in frames:
            if (key, off) in self._cache or key in self.problems:
                continue
            todo.setdefault(key, (path, bid, []))[2].append(off)
        for key, (path, bid, offs) in todo.items():
            offs = sorted(set(offs))
            try:
                data = symbolize_raw(path, bid, [max(0, o - 1) for o in offs])
            except HetmemError as exc:
                self.problems[key] = str(exc)
                continue
            for off, fr in zip(offs, data["frames"], strict=True):
                self._cache[(key, off)] = _location(fr)

    def lookup(self, key: str, path: str, bid: str, off: int) -> Location | None:
        if (key, off) not in self._cache and key not in self.problems:
            self.prefetch([(key, path, bid, off)])
        return self._cache.get((key, off))
