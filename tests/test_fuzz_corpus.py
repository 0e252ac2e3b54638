"""Replays the fuzz corpora (tests/fuzz/corpus/) through the parsers: every
input must parse or raise SchemaError, never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem import placement, profile
from hetmem.errors import SchemaError

CORPUS = Path(__file__).resolve().parent / "fuzz" / "corpus"


def _files(kind: str) -> list[Path]:
    return sorted(p for p in (CORPUS / kind).iterdir() if p.is_file())


def test_corpora_are_there():
    assert len(_files("profile")) >= 8 and len(_files("placement")) >= 6


def test_profile_corpus():
    parsed = 0
    for f in _files("profile"):
        data = f.read_bytes()
        try:
            p = profile.parse_bytes(data, f.name)
        except SchemaError as exc:
            assert "\n" not in str(exc), f.name
            continue
        parsed += 1
        m = profile.merge([p, p])
        assert len(m.sites) <= len(p.sites), f.name
    assert parsed >= 1  # the valid seeds still parse


def test_placement_corpus():
    parsed = 0
    for f in _files("placement"):
        data = f.read_bytes()
        try:
            p = placement.parse_bytes(data, f.name)
        except SchemaError as exc:
            assert "\n" not in str(exc), f.name
        else:
            parsed += 1
            try:
                text = placement.compact(p)
            except SchemaError:
                continue
            q = placement.parse_compact(text)
            assert sorted((s.id, s.tier, s.frames) for s in p.sites) == [
                (s.id, s.tier, s.frames) for s in q.sites
            ]
        try:
            placement.parse_compact(data.decode("utf-8", errors="replace"))
        except SchemaError:
            pass
    assert parsed >= 1


@pytest.mark.parametrize("name", ["valid_two_sites", "valid_empty"])
def test_valid_seeds_parse(name):
    profile.parse_bytes((CORPUS / "profile" / name).read_bytes(), name)
