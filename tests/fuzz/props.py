# SPDX-License-Identifier: BSD-3-Clause
"""The properties the fuzz targets check on one input, shared with the
corpus replay (tests/unit/test_fuzz_corpus.py), which runs without atheris.
Each returns True when the input parsed, False when it was refused with a
one-line SchemaError; anything else (another exception, a failed
assertion) is a bug."""

from __future__ import annotations

import math

from hetmem import _native, sizes
from hetmem.errors import SchemaError, UsageError
from hetmem.flow import spec
from hetmem.placement import fileformat as placement
from hetmem.placement import profile


def _refused(exc: SchemaError) -> bool:
    assert "\n" not in str(exc), str(exc)
    return False


def check_profile(data: bytes, name: str = "fuzz") -> bool:
    """Parses or refuses; a parsed profile merges with itself."""
    try:
        p = profile.parse_bytes(data, name)
    except SchemaError as exc:
        return _refused(exc)
    m = profile.merge([p, p])
    assert len(m.sites) <= len(p.sites), name
    for s in m.per_profile[0].values():
        assert s.peak_live_bytes >= 0, name
    return True


def check_placement(data: bytes, name: str = "fuzz") -> bool:
    """Parses or refuses; a parsed placement turns into a compact table that
    reads back the same sites; the compact reader refuses what it cannot
    read."""
    parsed = True
    try:
        p = placement.parse_bytes(data, name)
    except SchemaError as exc:
        parsed = _refused(exc)
    else:
        try:
            text = placement.compact(p)
        except SchemaError:
            text = None  # a path the compact table cannot hold (newline): refused
        if text is not None:
            q = placement.parse_compact(text)
            assert sorted((s.id, s.tier, s.frames) for s in p.sites) == [
                (s.id, s.tier, s.frames) for s in q.sites
            ], name
    try:
        placement.parse_compact(data.decode("utf-8", errors="replace"))
    except SchemaError:
        pass
    return parsed


def check_spec(data: bytes, name: str = "fuzz") -> bool:
    """A workflow spec (hetmem flow): parses into a spec whose numbers a run
    can use, or is refused with a one-line SpecError."""
    try:
        s = spec.parse(data.decode("utf-8", errors="replace"), name)
    except spec.SpecError as exc:
        assert "\n" not in str(exc), str(exc)
        return False
    for c in (s.writer, s.reader):
        assert 1 <= c.ranks <= 64 and math.isfinite(c.seconds) and c.seconds >= 0, name
    assert s.iterations >= 1 and s.step_bytes > 0 and s.slots >= 2, name
    assert s.writer.objects % s.writer.ranks == 0, name
    spec.check_tier(s.tier)
    return True


_BLANKS = " \t\n\v\f\r"


def check_size(data: bytes, name: str = "fuzz") -> bool:
    """A size as users write it: Python's parse_size refuses it with a
    one-line UsageError, or gives what the C runtime's hm_parse_size gives
    (which takes no trailing blanks); parse_budget takes no 0."""
    text = data.decode("utf-8", errors="replace")
    try:
        n = sizes.parse_size(text, "--size")
    except UsageError as exc:
        assert str(exc).isprintable(), (name, str(exc))
        return False
    assert 0 <= n < 2**64, name
    if "\0" not in text:
        assert _native.parse_size_native(text.rstrip(_BLANKS)) == n, (name, text)
    try:
        assert sizes.parse_budget(text) == n >= 1, name
    except UsageError:
        assert n == 0 or n > sizes.machine_memory(), name
    return True
