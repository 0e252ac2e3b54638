"""Replays the fuzz corpora (tests/fuzz/corpus/) through the parsers: every
input must parse or raise SchemaError, never another exception."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hetmem import profile

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from props import check_placement, check_profile

CORPUS = Path(__file__).resolve().parent / "fuzz" / "corpus"


def _files(kind: str) -> list[Path]:
    return sorted(p for p in (CORPUS / kind).iterdir() if p.is_file())


def test_corpora_are_there():
    assert len(_files("profile")) >= 8 and len(_files("placement")) >= 6


def test_profile_corpus():
    parsed = sum(check_profile(f.read_bytes(), f.name) for f in _files("profile"))
    assert parsed >= 1  # the valid seeds still parse


def test_placement_corpus():
    parsed = sum(check_placement(f.read_bytes(), f.name) for f in _files("placement"))
    assert parsed >= 1


@pytest.mark.parametrize("name", ["valid_two_sites", "valid_empty"])
def test_valid_seeds_parse(name):
    profile.parse_bytes((CORPUS / "profile" / name).read_bytes(), name)
