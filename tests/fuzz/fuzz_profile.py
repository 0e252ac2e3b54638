# SPDX-License-Identifier: BSD-3-Clause
"""atheris fuzz target: the profile reader and merging.

Run as README.md says (make fuzz), with tests/fuzz/corpus/profile. Any
input must parse or raise SchemaError; a parsed profile must merge.
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
