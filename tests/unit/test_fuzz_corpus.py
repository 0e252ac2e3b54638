# SPDX-License-Identifier: BSD-3-Clause
"""Replays the fuzz corpora (tests/fuzz/corpus/) through the parsers: every
input must parse or be refused with a one-line error, never another
exception; then runs each atheris target briefly (a bounded number of
inputs; `make fuzz` runs them for minutes)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from hetmem.placement import profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from props import check_placement, check_profile, check_size, check_spec

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
CORPUS = FUZZ / "corpus"
TARGETS = ("profile", "placement", "spec", "sizes")
BRIEF_RUNS = 20000


def _files(kind: str) -> list[Path]:
    return sorted(p for p in (CORPUS / kind).iterdir() if p.is_file())


def test_corpora_are_there():
    assert len(_files("profile")) >= 8 and len(_files("placement")) >= 6
    assert len(_files("spec")) >= 6 and len(_files("sizes")) >= 20


def test_profile_corpus():
    parsed = sum(check_profile(f.read_bytes(), f.name) for f in _files("profile"))
    assert parsed >= 1  # the valid seeds still parse


def test_placement_corpus():
    parsed = sum(check_placement(f.read_bytes(), f.name) for f in _files("placement"))
    assert parsed >= 1


@pytest.mark.parametrize("name", ["valid_two_sites", "valid_empty"])
def test_valid_seeds_parse(name):
    profile.parse_bytes((CORPUS / "profile" / name).read_bytes(), name)


def test_spec_corpus():
    parsed = sum(check_spec(f.read_bytes(), f.name) for f in _files("spec"))
    assert parsed >= 2  # the shipped specs among the seeds


def test_size_corpus():
    parsed = sum(check_size(f.read_bytes(), f.name) for f in _files("sizes"))
    assert parsed >= 10


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None, reason="atheris not installed (make venv)"
)
@pytest.mark.parametrize("target", TARGETS)
def test_atheris_target_finds_nothing_in_a_brief_run(target, tmp_path):
    """Each target mutates its corpus for BRIEF_RUNS inputs (a count, not a
    time); any input that breaks a property is a crash, saved under tmp_path."""
    (tmp_path / "new").mkdir()
    argv = [sys.executable, str(FUZZ / f"fuzz_{target}.py"), str(tmp_path / "new")]
    argv += [str(CORPUS / target), f"-runs={BRIEF_RUNS}", "-seed=1", "-max_len=4096"]
    argv += [f"-artifact_prefix={tmp_path}/"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    assert proc.returncode == 0 and not crashes, (crashes, proc.stderr[-4000:])
    assert f"Done {BRIEF_RUNS} runs" in proc.stderr, proc.stderr[-2000:]
