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
std::vector) is skipped like a runtime library, and so are the standard
library's templates that a library without debug information instantiated
out of line (`std::vector<...>::_M_realloc_insert` in a Debian package's
libgromacs: every vector of it would read the same).

A frame without a symbol (a static function of a stripped library) says
only its module offset: a site whose own frame is one is also named by its
first caller that has a symbol, so that it reads `libgromacs.so.7+0x4e3ca2
<- ... <- PairlistSet::constructPairlists(...)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

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

# Namespaces of the C++ standard library (libstdc++'s, libc++'s std::__1)
# and of its ABI, as a demangled function's qualified name starts.
CXX_RUNTIME_NAMESPACE = ("std::", "__gnu_cxx::", "__cxxabiv1::", "__gnu_debug::")

# A frame with no symbol: 'module+0xoffset' alone.
_RAW = re.compile(r"^[^ ]+\+0x[0-9a-f]+$")
# The module a frame's text names: '(module+0xoffset)' at its end.
_MODULE = re.compile(r"\(?([^ ()]+)\+0x[0-9a-f]+\)?$")
_MODULE_SUFFIX = re.compile(r" \([^ ()]+\+0x[0-9a-f]+\)$")
# Threading runtimes whose frames say where a thread started, not which
# part of the program allocated: no caller to name a site by.
THREAD_RUNTIME_MODULE = re.compile(r"^(libgomp|libomp|libiomp5|libpthread)\.so")


def raw_frame(module_path: str, offset: int) -> str:
    """A frame as 'module+0xoffset' (the module by its file name)."""
    return f"{module_path.rsplit('/', 1)[-1]}+0x{offset:x}"


def frame_text(module_path: str, offset: int, symbol: str | None) -> str:
    """A frame as 'function at file:line (module+0xoffset)', or the raw form
    alone when it has no symbol."""
    raw = raw_frame(module_path, offset)
    known = symbol and symbol != raw and symbol != "??"
    return f"{symbol} ({raw})" if known else raw


def qualified_name(text: str) -> str:
    """The qualified name of the function a frame's text names: its
    demangled signature without return type, parameters, source or module
    ('std::vector<int>::_M_realloc_insert<int>' for 'void
    std::vector<int>::_M_realloc_insert<int>(int&&) (lib.so+0x10)')."""
    text = _MODULE_SUFFIX.sub("", text).split(" at ", 1)[0]
    text = text.replace("(anonymous namespace)", "{anon}")
    depth, start = 0, 0
    for i, c in enumerate(text):
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == " " and depth == 0:
            start = i + 1  # what went before was the return type
        elif c == "(" and depth == 0 and not text[:i].endswith("operator"):
            return text[start:i]
    return text[start:]


def is_raw(text: str) -> bool:
    """A function text that is a module offset alone (no symbol)."""
    return bool(_RAW.match(text))


def frame_functions(module_path: str, offset: int, symbol: str | None) -> list[str]:
    """A frame as the functions a reader sees, innermost first: those the
    compiler inlined there, then the frame's own function, which carries the
    module offset ('module+0xoffset' alone without a symbol)."""
    raw = raw_frame(module_path, offset)
    if not symbol or symbol == raw or symbol == "??":
        return [raw]
    parts = symbol.split(INLINE_SEP)
    parts[-1] = f"{parts[-1]} ({raw})"
    return parts


def in_runtime(module_path: str, text: str) -> bool:
    """A function of a frame that belongs to a language runtime: its module
    is one, or its source is a runtime's header."""
    if RUNTIME_MODULE.match(module_path.rsplit("/", 1)[-1]):
        return True
    if qualified_name(text).startswith(CXX_RUNTIME_NAMESPACE):
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
    it apart from all of them ('<- ... <-' when frames were skipped). An own
    frame without a symbol also shows the first caller that has one.

    frames[i] are site i's frames as text, innermost first, each naming its
    module offset (so that two calls on one source line still differ)."""
    by_name: dict[str, list[int]] = {}
    for i, (fr, k) in enumerate(zip(frames, starts, strict=True)):
        by_name.setdefault(fr[k] if k < len(fr) else "", []).append(i)
    labels = []
    for i, (fr, k) in enumerate(zip(frames, starts, strict=True)):
        if k >= len(fr):
            labels.append("")
            continue
        shown = [k]
        if is_raw(fr[k]):
            named = next((t for t in range(k + 1, len(fr)) if _names_code(fr[t])), None)
            if named is not None:
                shown.append(named)
        differ = _first_difference(frames, starts, i, by_name[fr[k]])
        if differ is not None:
            shown.append(differ)
        labels.append(_join(fr, sorted(set(shown))))
    return labels


def _names_code(text: str) -> bool:
    """A frame's text that names a function of the program or its libraries
    (not a module offset alone, not a language or threading runtime's)."""
    m = _MODULE.search(text)
    module = m.group(1) if m else ""
    if is_raw(text) or RUNTIME_MODULE.match(module) or THREAD_RUNTIME_MODULE.match(module):
        return False
    return not qualified_name(text).startswith(CXX_RUNTIME_NAMESPACE)


def _first_difference(
    frames: Sequence[Sequence[str]], starts: Sequence[int], i: int, same: list[int]
) -> int | None:
    """The index of site i's first caller frame that tells it apart from the
    other sites whose own frame reads the same (`same`, i included); None
    when none does (cut at the depth) or no other site shares it."""
    fr, k = frames[i], starts[i]
    need = 0  # how many caller frames it takes to differ from all
    for j in same:
        if j == i:
            continue
        mine, theirs = fr[k + 1 :], frames[j][starts[j] + 1 :]
        t = 0
        while t < len(mine) and t < len(theirs) and mine[t] == theirs[t]:
            t += 1
        need = max(need, t + 1)
    return k + need if 0 < need <= len(fr) - k - 1 else None


def _join(fr: Sequence[str], shown: list[int]) -> str:
    """The frames at the indices shown, innermost first: ' <- ' between
    neighbours, ' <- ... <- ' where frames were skipped."""
    out = fr[shown[0]]
    for a, b in pairwise(shown):
        out += (" <- " if b == a + 1 else " <- ... <- ") + fr[b]
    return out


_DIRS = re.compile(r" at /(?:[^ :/]+/)*([^ :/]+:\d+)")


def short(label: str) -> str:
    """A label for a table: source files by their base name ('at heat.f90:7'
    for 'at /home/u/src/heat.f90:7'); --json and the placement file keep the
    paths whole."""
    return _DIRS.sub(r" at \1", label)
