# SPDX-License-Identifier: BSD-3-Clause
"""A battery of malformed inputs across every verb (issue 19): every file a
verb takes given as garbage bytes (not UTF-8), text garbage, an empty file, a
directory and a missing path (outputs: a path in a missing directory), every
size as 1Q, -4G, 0, 99999T, more than this machine's memory, abc, nothing and
a 400-digit number, and bad counts and times. Each must be refused before any
work starts: exit code 2, exactly one line on stderr naming the problem, no
traceback, nothing written in the working directory.

The cases run in-process through hetmem.cli.main (a process each would make
the battery take minutes on two cores); an alarm turns a hang into a failure.
test_battery_subprocess runs one case per verb as a user would."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetmem.cli import VERBS, main

FUZZ_CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"
PROFILE = str(FUZZ_CORPUS / "profile" / "valid_two_sites")
NO_CMD = "/nonexistent-hetmem-dir/never-runs"
GARBAGE = bytes(range(128, 256)) + b"\x00\xff\xfe garbage \xc3\x28" + bytes(range(0, 128))
TEXT = "{]] this = is [not\n\tany hetmem file ===\n"
# file kinds: what {F} becomes (see _paths)
INPUTS = ("garbage", "text", "empty", "dir", "missing")
HALT_S = 30  # a hang guard, not a timing: refusals come before any work

# (argv with {F} for a file, the file kinds to try, words the error line has)
FILE_CASES: list[tuple[str, tuple[str, ...], str]] = [
    ("report {F}", ("garbage", "text", "empty", "dir", "missing"), ""),
    ("run --mode flat --fast-budget 64M --placement {F} -- true", INPUTS, "{F}"),
    ("run --mode hybrid --fast-budget 64M --placement {F} -- true", INPUTS, "{F}"),
    ("run --mode dram --stats {F} -- true", ("dir", "nodir"), "--stats"),
    ("run --mode cache --fast-budget 64M --storage {F} -- true", ("garbage", "missing"), ""),
    ("flow run {F}", INPUTS, "{F}"),
    ("flow advise {F}", INPUTS, "{F}"),
    ("flow sweep {F}", INPUTS, "{F}"),
    ("flow sweep small-io -o {F}", ("dir", "nodir"), "-o"),
    ("profile show {F}", INPUTS, "{F}"),
    ("advise {F} --fast-budget 16M", INPUTS, "{F}"),
    ("advise {P} --fast-budget 16M --tiers {F}", INPUTS, "{F}"),
    ("advise {P} --fast-budget 16M -o {F}", ("dir", "nodir"), "-o"),
    ("tiers --fsroot {F}", INPUTS, ""),
    ("tiers --no-probe --storage {F}", ("garbage", "missing"), ""),
    ("probe --storage {F}", ("garbage", "empty", "missing"), ""),
    ("bench sdm --storage {F}", ("garbage", "missing"), ""),
    ("bench kernels stream --storage {F}", ("garbage", "missing"), ""),
    ("bench imdt -o {F}", ("garbage", "empty"), ""),
    ("bench placement --storage {F}", ("garbage", "missing"), "--storage"),
    ("bench reference --storage {F}", ("garbage", "missing"), ""),
    ("bench flow --adios-python {F}", INPUTS, "--adios-python"),
    ("demo --storage {F}", ("garbage", "empty", "missing"), ""),
    ("recommend --fast-budget 64M --storage {F} -- true", ("garbage", "empty", "missing"), ""),
    ("recommend --fast-budget 64M -o {F} -- true", ("garbage",), "-o"),
    ("bench budgets --storage {F}", ("garbage", "missing"), ""),
    ("bench budgets -o {F}", ("garbage",), "-o"),
    ("demo -o {F}", ("garbage",), ""),
    ("config {F}", INPUTS, "unrecognized"),
]

# "1\nQ": the message quotes it and must stay one line; "\u200364M": the C
# parser knows only ASCII blanks, so Python must refuse it too
BAD_SIZES = ("1Q", "-4G", "0", "99999T", "{RAM2}", "abc", "", "1" * 400, "1\nQ", "\u200364M")
# the budget-taking verbs: argv with {S} for the size
BUDGET_CASES = [
    f"run --mode cache --fast-budget {{S}} -- {NO_CMD}",
    f"run --mode flat --placement {PROFILE} --fast-budget {{S}} -- {NO_CMD}",
    "advise {P} --fast-budget {S}",
    "bench sdm --fast-budget {S} --storage {garbage}",
    "bench imdt --fast-budget {S}",
    "bench kernels stream --fast-budget {S}",
    "demo --fast-budget {S}",
    f"recommend --fast-budget {{S}} -- {NO_CMD}",
]
OTHER_SIZES = ("1Q", "-4G", "abc", "", "1" * 400, "1\nQ")
SIZE_CASES = [
    f"run --mode cache --fast-budget 64M --threshold {{S}} -- {NO_CMD}",
    "probe --storage-size {S}",
    "probe --array-size {S}",
    "bench reference --array-size {S}",
    "bench placement --footprint {S}",
    "bench budgets --footprint {S}",
    "flow bench --large-bytes {S}",
    f"profile --threshold {{S}} -- {NO_CMD}",
]
# (argv, words the error line has)
NUMBER_CASES = [
    ("advise {P} --fast-budget 16M --time-limit nan", "--time-limit"),
    ("advise {P} --fast-budget 16M --time-limit -1", "--time-limit"),
    ("advise {P} --fast-budget 16M --time-limit soon", "--time-limit"),
    ("advise {P} --fast-budget 16M --max-ilp-sites -1", "--max-ilp-sites"),
    ("advise {P} --fast-budget 16M --ranks-per-node 0", "--ranks-per-node"),
    ("advise {P} --fast-budget 16M --explain -1", "--explain"),
    ("advise --benchmark 0", "--benchmark"),
    ("advise --benchmark many", "--benchmark"),
    ("probe --threads 0", "--threads"),
    ("probe --nodes -1", "--nodes"),
    ("flow run small-io --ranks 0", "--ranks"),
    ("flow run small-io --channel tape", "--channel"),
    ("flow calibrate --max-streams 0", "--max-streams"),
    ("flow advise small-io --max-ranks -1", "--max-ranks"),
    ("flow sweep small-io --repeat -1", "--repeat"),
    ("bench lattice --threads -1", "--threads"),
    ("bench sdm --repeat 0", "--repeat"),
    ("bench sdm --sizes 0x", "--sizes"),
    ("bench poly --kernel-min-time inf", "--kernel-min-time"),
    ("bench imdt --fits-repeat -1", "--fits-repeat"),
    ("bench placement --iters x", "--iters"),
    ("demo --repeat -1", "--repeat"),
    ("recommend --fast-budget 64M --time soon -- true", "--time"),
    ("recommend --fast-budget 64M --rounds 0 -- true", "--rounds"),
    ("recommend --fast-budget 64M --modes turbo -- true", "--modes"),
    ("bench budgets --rounds 0", "--rounds"),
    ("bench budgets --budgets 150%", "--budgets"),
    ("bench budgets --variants nope", "--variants"),
    ("bench budgets --modes turbo", "--modes"),
    ("demo --sizes nan", "--sizes"),
    ("demo --rounds 0", "--rounds"),
    ("demo --kernels nosuchkernel", "nosuchkernel"),
    ("profile --depth 0 -- " + NO_CMD, "--depth"),
    ("profile show {P} --top -1", ""),
    ("run --mode turbo -- true", "--mode"),
    ("run --mode cache --fast-budget 64M --storage-full ignore -- true", "--storage-full"),
    ("report", "required"),
    ("tiers --bogus", "unrecognized"),
    ("config --json extra", "unrecognized"),
]


# the command of run and profile: what a shell gives (126: found but not
# runnable, 127: not found); (argv, kind, exit code)
COMMAND_VERBS = (
    "run --mode dram --",
    "run --mode cache --fast-budget 64M --",
    "profile --",
    "recommend --fast-budget 64M --",
)
COMMAND_KINDS = (
    ("garbage", 126),
    ("xgarbage", 126),
    ("empty", 126),
    ("dir", 126),
    ("missing", 127),
)
COMMAND_CASES = [
    ([*verb.split(" "), "{" + kind + "}"], code)
    for verb in COMMAND_VERBS
    for kind, code in COMMAND_KINDS
]


def _ram2() -> str:
    """Twice this machine's memory (MemTotal), in bytes."""
    return str(2 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _cases() -> Iterator[tuple[list[str], str]]:
    for argv, kinds, words in FILE_CASES:
        for kind in kinds:
            yield argv.replace("{F}", "{" + kind + "}").split(" "), words.replace("{F}", "")
    for argv in BUDGET_CASES:
        for size in BAD_SIZES:
            yield _with_size(argv, size), "--fast-budget"
    for argv in SIZE_CASES:
        for size in OTHER_SIZES:
            yield _with_size(argv, size), _size_flag(argv)
    for argv, words in NUMBER_CASES:
        yield argv.split(" "), words


def _with_size(argv: str, size: str) -> list[str]:
    return [size if a == "{S}" else a for a in argv.split(" ")]


def _size_flag(argv: str) -> str:
    words = argv.split(" ")
    return words[words.index("{S}") - 1]


CASES = list(_cases())


def _ids() -> list[str]:
    return [f"{i}: {ascii(' '.join(a))[1:-1][:70]}" for i, (a, _) in enumerate(CASES)]


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """The inputs, in a folder of their own beside the working directory."""
    inp = tmp_path / "inputs"
    inp.mkdir()
    (inp / "garbage").write_bytes(GARBAGE)
    (inp / "xgarbage").write_bytes(GARBAGE)
    (inp / "xgarbage").chmod(0o755)
    (inp / "text").write_text(TEXT)
    (inp / "empty").write_bytes(b"")
    (inp / "dir").mkdir()
    return {
        "garbage": str(inp / "garbage"),
        "xgarbage": str(inp / "xgarbage"),
        "text": str(inp / "text"),
        "empty": str(inp / "empty"),
        "dir": str(inp / "dir"),
        "missing": str(inp / "missing"),
        "nodir": str(inp / "no-such-dir" / "out"),
        "P": PROFILE,
        "RAM2": _ram2(),
    }


def _fill(argv: list[str], paths: dict[str, str]) -> list[str]:
    out = []
    for a in argv:
        for k, v in paths.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


class Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang(f"no refusal within {HALT_S} s: the case started work")


def run_inprocess(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """hetmem ARGV through cli.main: (exit code, stderr). Any exception other
    than SystemExit is what a user would see as a traceback."""
    old_argv, sys.argv = sys.argv, ["hetmem", *argv]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HALT_S)
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        sys.argv = old_argv
    return rc, capfd.readouterr().err


def assert_clean(rc: int, err: str, words: str, code: int = 2) -> None:
    assert "Traceback" not in err, err
    assert rc == code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("hetmem") and "error:" in lines[0], err
    assert words in lines[0], err


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working directory, a private cache; after the case, both the
    working directory and the inputs are as they were."""
    work = tmp_path / "work"
    work.mkdir()
    for var in ("HETMEM_LIBDIR", "HETMEM_CBUILD"):  # a developer's relative build tree
        if os.environ.get(var):
            monkeypatch.setenv(var, os.path.abspath(os.environ[var]))
    monkeypatch.chdir(work)
    monkeypatch.delenv("HETMEM_BUDGET_OVER_RAM", raising=False)
    monkeypatch.setenv("HETMEM_CACHE_DIR", str(tmp_path / "cache"))
    yield work
    assert not list(work.iterdir()), "a refused command left files behind"
    inputs = sorted(p.name for p in (tmp_path / "inputs").iterdir())
    assert inputs == ["dir", "empty", "garbage", "text", "xgarbage"]


@pytest.mark.parametrize(("argv", "words"), CASES, ids=_ids())
def test_battery(argv, words, paths, work, capfd):
    rc, err = run_inprocess(_fill(argv, paths), capfd)
    assert_clean(rc, err, words)


@pytest.mark.parametrize(
    ("argv", "code"), COMMAND_CASES, ids=[" ".join(a) for a, _ in COMMAND_CASES]
)
def test_battery_commands(argv, code, paths, work, capfd):
    rc, err = run_inprocess(_fill(argv, paths), capfd)
    assert_clean(rc, err, "", code)


def test_battery_is_large_and_covers_every_verb():
    assert len(CASES) + len(COMMAND_CASES) >= 60
    assert {argv[0] for argv, _ in CASES} == set(VERBS)
    for verb in VERBS:
        kinds = {k for argv, ks, _ in FILE_CASES if argv.split(" ")[0] == verb for k in ks}
        # a folder is no bad input where a verb wants one (probe --storage)
        assert {"garbage", "missing"} <= kinds and kinds & {"empty", "dir"}, verb


# one case per verb (and the findings of issue 19) as a user runs them
SUBPROCESS = [
    "report {garbage}",
    "run --mode flat --fast-budget 64M --placement {garbage} -- true",
    f"run --mode cache --fast-budget 99999T -- {NO_CMD}",
    "flow run {garbage}",
    "profile show {garbage}",
    "advise {P} --fast-budget 16M -o {nodir}",
    "advise {P} --fast-budget 0",
    "tiers --fsroot {garbage}",
    "probe --storage {garbage}",
    "bench sdm --fast-budget 1Q --storage {dir}",
    "demo --fast-budget {RAM2} --storage {dir}",
    "config {garbage}",
]


@pytest.mark.parametrize("argv", SUBPROCESS)
def test_battery_subprocess(argv, paths, hetmem):
    proc = hetmem(*_fill(argv.split(" "), paths), timeout=120)
    assert_clean(proc.returncode, proc.stderr, "")
    assert "Traceback" not in proc.stdout
