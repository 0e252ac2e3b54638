# SPDX-License-Identifier: BSD-3-Clause
"""atheris fuzz target: sizes and budgets as users write them (4G, 512MiB).

Run as README.md says, with tests/fuzz/corpus/sizes. Any input must be
refused with a one-line UsageError or give what the C runtime's
hm_parse_size gives; a budget is never 0 nor above this machine's memory.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from props import check_size


def test_one_input(data: bytes) -> None:
    check_size(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
