"""atheris fuzz target: the placement reader (TOML) and the compact table.

Run as tests/fuzz/fuzz_profile.py says, with tests/fuzz/corpus/placement.
Any input must parse or raise SchemaError; a parsed placement must turn
into a compact table that reads back the same sites.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from hetmem import placement
    from hetmem.errors import SchemaError


def test_one_input(data: bytes) -> None:
    try:
        p = placement.parse_bytes(data, "fuzz")
    except SchemaError:
        pass
    else:
        try:
            text = placement.compact(p)
        except SchemaError:
            return  # a path the compact table cannot hold (newline): refused
        q = placement.parse_compact(text)
        assert sorted((s.id, s.tier, s.frames) for s in p.sites) == [
            (s.id, s.tier, s.frames) for s in q.sites
        ]
    try:
        placement.parse_compact(data.decode("utf-8", errors="replace"))
    except SchemaError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
