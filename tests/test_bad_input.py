"""Bad input on the newer command-line paths (profile recording, bench
placement, bench lattice, flow sweep/advise/bench, bench kernels): each is
refused before any measurement starts, with one error line naming the
option and exit code 2, never a traceback."""

from __future__ import annotations

import os

import pytest

# (argv, words the one error line must contain)
CASES = [
    # hetmem profile (recording)
    (["profile", "--period", "nan", "--", "true"], "--period"),
    (["profile", "--period", "inf", "--", "true"], "--period"),
    (["profile", "--period", "0", "--", "true"], "--period"),
    (["profile", "--period", "soon", "--", "true"], "--period"),
    (["profile", "--sampler", "bogus", "--", "true"], "--sampler"),
    (["profile", "--depth", "65", "--", "true"], "--depth"),
    (["profile", "--threshold", "1x", "--", "true"], "--threshold"),
    (["profile", "--threshold", "1", "--", "true"], "--threshold"),
    (["profile", "-o", "/nonexistent-hetmem-dir/p", "--", "true"], "does not exist"),
    # hetmem bench placement
    (["bench", "placement", "--footprint", "lots"], "--footprint"),
    (["bench", "placement", "--footprint", "0"], "--footprint"),
    (["bench", "placement", "--iters", "0"], "--iters"),
    (["bench", "placement", "--hot-passes", "-1"], "--hot-passes"),
    (["bench", "placement", "--repeat", "0"], "--repeat"),
    (["bench", "placement", "--pairs", "0"], "--pairs"),
    (["bench", "placement", "--pairs", "many"], "--pairs"),
    (["bench", "placement", "--modes", "turbo"], "unknown mode 'turbo'"),
    (["bench", "placement", "--modes", ","], "--modes"),
    (["bench", "placement", "--variants", "bogus"], "unknown variant 'bogus'"),
    (["bench", "placement", "--variants", ","], "--variants"),
    (["bench", "placement", "--storage", "/nonexistent-hetmem-dir"], "--storage"),
    # hetmem bench lattice
    (["bench", "lattice", "--parts", "bogus"], "unknown part 'bogus'"),
    (["bench", "lattice", "--parts", ","], "--parts"),
    (["bench", "lattice", "--parts", "modes"], "needs -o"),
    (["bench", "lattice", "--threads", "0"], "--threads"),
    (["bench", "lattice", "--threads", "two"], "--threads"),
    # hetmem flow sweep / advise
    (["flow", "sweep", "no-such-spec"], "no such spec"),
    (["flow", "sweep", "no-such-spec", "--calibrate"], "no such spec"),
    (["flow", "sweep", "small-io", "--repeat", "0"], "--repeat"),
    (["flow", "sweep", "small-io", "--max-ranks", "0"], "--max-ranks"),
    (["flow", "sweep", "small-io", "--repeat", "x"], "--repeat"),
    (["flow", "advise", "small-io", "--max-ranks", "0"], "--max-ranks"),
    # hetmem flow bench and its alias hetmem bench flow
    (["flow", "bench", "--steps", "0"], "--steps"),
    (["flow", "bench", "--small-objects", "-1"], "--small-objects"),
    (["flow", "bench", "--large-bytes", "xx"], "--large-bytes"),
    (["flow", "bench", "--large-bytes", "0"], "--large-bytes"),
    (["flow", "bench", "--tier", "tape"], "--tier"),
    (["flow", "bench", "--adios-python", "/nonexistent-hetmem-python"], "cannot import adios2"),
    (["bench", "flow", "--steps", "0"], "--steps"),
    (["bench", "flow", "--adios-python", "/nonexistent-hetmem-python"], "cannot import adios2"),
    # hetmem bench kernels --kernel-min-time (the kernels' own --min-time is in test_kernels)
    (["bench", "kernels", "stream", "--kernel-min-time", "nan"], "--kernel-min-time"),
    (["bench", "kernels", "stream", "--kernel-min-time", "601"], "--kernel-min-time"),
    (["bench", "kernels", "stream", "--kernel-min-time", "soon"], "--kernel-min-time"),
]


def _assert_refused(proc, words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    # one line: nothing was measured or started before the refusal
    assert len(lines) == 1, proc.stderr
    assert "error:" in lines[0] and words in lines[0], proc.stderr


@pytest.mark.parametrize(("argv", "words"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2(hetmem, tmp_path, argv, words):
    if argv[:2] == ["bench", "kernels"]:
        argv = [*argv, "-o", str(tmp_path / "out")]
    # a hang guard, not a timing assertion: refusals come before any work
    proc = hetmem(*argv, timeout=120)
    _assert_refused(proc, words)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("verb", [["flow", "bench"], ["bench", "flow"]])
def test_adios_python_that_exits_0_without_adios2_is_refused(hetmem, tmp_path, verb):
    # a program that succeeds at anything (as /bin/true does) is no
    # interpreter with adios2: it used to be accepted and the bench then died
    # with a traceback after measuring the channel
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(fake, 0o755)
    proc = hetmem(*verb, "--adios-python", str(fake), timeout=120)
    _assert_refused(proc, f"--adios-python {fake}: cannot import adios2")
