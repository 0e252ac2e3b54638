"""atheris fuzz target: the profile reader and merging.

Run (atheris is not a dependency of hetmem; use a separate venv):
  python -m venv /tmp/fz && /tmp/fz/bin/pip install atheris
  PYTHONPATH=python /tmp/fz/bin/python tests/fuzz/fuzz_profile.py \\
      tests/fuzz/corpus/profile -max_total_time=300 -max_len=4096
Any input must parse or raise SchemaError; a parsed profile must merge.
New interesting inputs land in the corpus directory (keep them in git;
tests/test_fuzz_corpus.py replays them through the same checks, tests/fuzz/props.py).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from props import check_profile


def test_one_input(data: bytes) -> None:
    check_profile(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
