"""The properties the fuzz targets check on one input, shared with the
corpus replay (tests/test_fuzz_corpus.py), which runs without atheris.
Each returns True when the input parsed, False when it was refused with a
one-line SchemaError; anything else (another exception, a failed
assertion) is a bug."""

from __future__ import annotations

from hetmem import placement, profile
from hetmem.errors import SchemaError


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
