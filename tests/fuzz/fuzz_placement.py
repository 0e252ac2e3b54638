# SPDX-License-Identifier: BSD-3-Clause
"""atheris fuzz target: the placement reader (TOML) and the compact table.

Run as README.md says (make fuzz), with tests/fuzz/corpus/placement.
Any input must parse or raise SchemaError; a parsed placement must turn
into a compact table that reads back the same sites.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from props import check_placement


def test_one_input(data: bytes) -> None:
    check_placement(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
