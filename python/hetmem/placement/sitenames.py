# SPDX-License-Identifier: BSD-3-Clause
"""Names for allocation sites that a person can tell apart.

A site is a call stack. It is shown by its innermost frame in the program
(frames in language runtimes such as C++'s operator new are skipped), but
sites often share that frame: a helper that allocates (Fortran's
`make_field`, C's `xmalloc`) called from several places is one frame and
several sites. Such a site is named by its own frame and the first caller
frame in which it differs from every other site of that name, so that
`profile show`, `advise` and its placement file do not list two rows that
read the same. Optimized Fortran and C often give two calls in one routine
the same source line, which is why frames are compared with their module
offsets, not only as symbols.

A frame in code the compiler inlined stands for several functions (an
-O3 C++ time step inlined into main makes every array of it read `main at
lulesh.cc:2748`): it is expanded into them, innermost first, so a site
reads `Allocate<double> at lulesh.h:60 <- IntegrateStressForElems at
lulesh.cc:516`. Code inlined from the language runtimes' headers (C++'s
std::vector) is skipped like a runtime library.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Language runtimes whose allocation entry points (C++'s operator new,
# libgfortran's) sit between the program's code and malloc: a site is named
# by its first frame outside them.
RUNTIME_MODULE = re.compile(
    r"^(libstdc\+\+|libc\+\+|libc\+\+abi|libc|libgfortran|libgcc_s|ld-linux[-\w]*|"
    r"libhetmem\w*)\.so"
)


# What separates the functions of one frame (symbolize.Location's text).
INLINE_SEP = " <- "

# Headers of the language runtimes, whose code the compiler inlines into the
# program's own functions.
SYSTEM_SOURCE = re.compile(r"^/usr/(?:local/)?include/|/include/c\+\+/|^/usr/lib/gcc/")


def raw_frame(module_path: str, offset: int) -> str:
    """A frame as 'module+0xoffset' (the module by its file name)."""
    return f"{module_path.rsplit('/', 1)[-1]}+0x{offset:x}"


def frame_text(module_path: str, offset: int, symbol: str | None) -> str:
    """A frame as 'function at file:line (module+0xoffset)', or the raw form
    alone when it has no symbol."""
    raw = raw_frame(module_path, offset)
    return f"{symbol} ({raw})" if symbol and symbol != raw else raw


def frame_functions(module_path: str, offset: int, symbol: str | None) -> list[str]:
    """A frame as the functions a reader sees, innermost first: those the
    compiler inlined there, then the frame's own function, which carries the
    module offset ('module+0xoffset' alone without a symbol)."""
    raw = raw_frame(module_path, offset)
    if not symbol or symbol == raw:
        return [raw]
    parts = symbol.split(INLINE_SEP)
    parts[-1] = f"{parts[-1]} ({raw})"
    return parts


def in_runtime(module_path: str, text: str) -> bool:
    """A function of a frame that belongs to a language runtime: its module
    is one, or its source is a runtime's header."""
    if RUNTIME_MODULE.match(module_path.rsplit("/", 1)[-1]):
        return True
    return " at " in text and bool(SYSTEM_SOURCE.search(text.rsplit(" at ", 1)[1]))


def site_functions(
    paths: Sequence[str], offsets: Sequence[int], symbols: Sequence[str | None]
) -> tuple[list[str], int, tuple[int, int]]:
    """A site's frames expanded into functions (frame_functions), the index
    of the first one outside the language runtimes (0 when none is), and
    where that one is: (frame index, position in the frame's functions)."""
    texts: list[str] = []
    start, where = -1, (0, 0)
    for k, (path, off, sym) in enumerate(zip(paths, offsets, symbols, strict=True)):
        for pos, text in enumerate(frame_functions(path, off, sym)):
            if start < 0 and not in_runtime(path, text):
                start, where = len(texts), (k, pos)
            texts.append(text)
    return texts, max(start, 0), where


def first_user_frame(module_paths: Sequence[str]) -> int:
    """The index of the innermost frame outside the language runtimes (0
    when every frame is in one), given each frame's module path."""
    for k, path in enumerate(module_paths):
        if not RUNTIME_MODULE.match(path.rsplit("/", 1)[-1]):
            return k
    return 0


def distinct_labels(frames: Sequence[Sequence[str]], starts: Sequence[int]) -> list[str]:
    """One label per site: frames[i][starts[i]], and when another site's
    label would read the same, ' <- ' and the first caller frame that tells
    it apart from all of them ('<- ... <-' when frames were skipped).

    frames[i] are site i's frames as text, innermost first, each naming its
    module offset (so that two calls on one source line still differ)."""
    by_name: dict[str, list[int]] = {}
    for i, (fr, k) in enumerate(zip(frames, starts, strict=True)):
        by_name.setdefault(fr[k] if k < len(fr) else "", []).append(i)
    labels = []
    for i, (fr, k) in enumerate(zip(frames, starts, strict=True)):
        own = fr[k] if k < len(fr) else ""
        others = [j for j in by_name[own] if j != i]
        if not others:
            labels.append(own)
            continue
        need = 0  # how many caller frames it takes to differ from all
        for j in others:
            mine, theirs = fr[k + 1 :], frames[j][starts[j] + 1 :]
            t = 0
            while t < len(mine) and t < len(theirs) and mine[t] == theirs[t]:
                t += 1
            need = max(need, t + 1)
        if need > len(fr) - k - 1:
            labels.append(own)  # no frame tells them apart (cut at the depth)
            continue
        arrow = " <- " if need == 1 else " <- ... <- "
        labels.append(own + arrow + fr[k + need])
    return labels


_DIRS = re.compile(r" at /(?:[^ :/]+/)*([^ :/]+:\d+)")


def short(label: str) -> str:
    """A label for a table: source files by their base name ('at heat.f90:7'
    for 'at /home/u/src/heat.f90:7'); --json and the placement file keep the
    paths whole."""
    return _DIRS.sub(r" at \1", label)
