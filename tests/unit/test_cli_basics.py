# SPDX-License-Identifier: BSD-3-Clause
"""The CLI frame: help, version, options, sizes, one-line errors."""

from __future__ import annotations

import argparse
import json

import pytest

from hetmem import _native
from hetmem.cli import build_parser
from hetmem.errors import UsageError
from hetmem.sizes import format_num, format_size, parse_size


def test_help_lists_verbs(hetmem):
    proc = hetmem("--help")
    assert proc.returncode == 0
    assert "config" in proc.stdout


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_help_formats():
    # `hetmem bench --help` once raised a TypeError: a suite's one-line help
    # held a bare "%", which argparse reads as a format directive.
    seen = 0
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "usage:" in text, path
        seen += 1
    assert seen > 20


def test_no_verb_is_usage_error(hetmem):
    assert hetmem().returncode == 2


def test_unknown_verb(hetmem):
    proc = hetmem("frobnicate")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("text", ["4096", "64K", "512MiB", "4G", "1.5GB", "2 TiB", "10kb"])
def test_python_and_c_size_parsers_agree(text):
    assert parse_size(text) == _native.parse_size_native(text)


@pytest.mark.parametrize("text", ["", "-1G", "4X", "0.3", "G"])
def test_bad_sizes(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_format_size():
    assert format_size(1536) == "1.5 KiB"
    assert format_size(4 << 30) == "4 GiB"
    # XSBench's 1047960000 bytes read "1e+03 MiB" in recommend's answer
    assert format_size(1047960000) == "999 MiB"
    assert format_size(1000 << 20) == "1000 MiB"
    assert format_size((1023 << 20) + (1 << 19)) == "1024 MiB"
    assert format_size(123.4 * 1024) == "123 KiB"


def test_format_num_never_writes_an_exponent_above_one():
    # advise's tier table printed the storage tier's latency as "1e+05" ns
    assert format_num(100000.0) == "100,000"
    assert format_num(7593792.0) == "7,593,792"
    assert format_num(999.7) == "1,000"
    assert [format_num(v) for v in (0.0123, 4.56, 789.0, 0.0)] == ["0.0123", "4.56", "789", "0"]


def test_config_json_shows_env_origin(hetmem):
    proc = hetmem("config", "--json", env={"HETMEM_FETCH_UNIT": "1MiB"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1
    row = next(o for o in data["options"] if o["name"] == "fetch_unit")
    assert row == {**row, "value": "1MiB", "origin": "env", "env": "HETMEM_FETCH_UNIT"}


def test_bad_env_value_is_one_line_error(hetmem):
    proc = hetmem("config", env={"HETMEM_IO_DEPTH": "deep"})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "HETMEM_IO_DEPTH='deep'" in proc.stderr


def test_a_verb_loads_its_own_module_only():
    # `hetmem run` is the parent of the user's command, and scripts (and
    # the TCG guests of tests/vm) start it many times: it imports run's
    # module, not the other verbs' (half its start-up time)
    import subprocess
    import sys

    code = (
        "import sys, hetmem.cli\n"
        "try:\n    hetmem.cli.main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('hetmem.commands.')), "
        "file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "usage: hetmem run" in proc.stdout
    assert proc.stderr.strip() == "['hetmem.commands.run']", proc.stderr


def test_start_up_does_not_load_numpy():
    # `hetmem run` builds every verb's parser at start-up; numpy (and the
    # OpenBLAS threads it starts, which spin for a while) belongs to the
    # verbs that compute, not to the parent of the user's command
    import subprocess
    import sys

    code = (
        "import sys, hetmem.cli; hetmem.cli.build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
