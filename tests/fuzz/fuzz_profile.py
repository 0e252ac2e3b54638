"""atheris fuzz target: the profile reader and merging.

Run (atheris is not a dependency of hetmem; use a separate venv):
  python -m venv /tmp/fz && /tmp/fz/bin/pip install atheris
  PYTHONPATH=python /tmp/fz/bin/python tests/fuzz/fuzz_profile.py \\
      tests/fuzz/corpus/profile -max_total_time=300 -max_len=4096
Any input must parse or raise SchemaError; a parsed profile must merge.
New interesting inputs land in the corpus directory (keep them in git;
tests/test_fuzz_corpus.py replays them).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from hetmem import profile
    from hetmem.errors import SchemaError


def test_one_input(data: bytes) -> None:
    try:
        p = profile.parse_bytes(data, "fuzz")
    except SchemaError:
        return
    m = profile.merge([p, p])
    assert len(m.sites) <= len(p.sites)
    for s in m.per_profile[0].values():
        assert s.peak_live_bytes >= 0


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
