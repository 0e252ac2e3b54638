# SPDX-License-Identifier: BSD-3-Clause
"""atheris fuzz target: the workflow spec reader (hetmem flow, TOML).

Run as README.md says, with tests/fuzz/corpus/spec. Any input must parse
into a spec a run can use or raise SpecError with a one-line message.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from props import check_spec


def test_one_input(data: bytes) -> None:
    check_spec(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
