# SPDX-License-Identifier: BSD-3-Clause
"""Bad input on the newer command-line paths (profile recording, bench
placement, bench lattice, flow sweep/advise/bench, bench kernels): each is
refused before any measurement starts, with one error line naming the
option and exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hetmem import sizes
from hetmem.errors import UsageError
from hetmem.placement import fileformat as placement

# (argv, words the one error line must contain)
CASES = [
    # hetmem run with neither mode nor budget: what to add, in one line
    (["run", "--", "true"], "--mode dram runs the command as it is"),
    (["run", "true"], "e.g. --fast-budget 4G"),
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
    (["bench", "placement", "--footprint", "100T"], "half of this machine"),
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
    (["flow", "sweep", "small-io", "--repeat", "1"], "--repeat: at least 2"),
    (["flow", "sweep", "small-io", "--full"], "--full"),
    (["flow", "sweep", "small-io", "--max-ranks", "0"], "--max-ranks"),
    (["flow", "sweep", "small-io", "--repeat", "x"], "--repeat"),
    (["flow", "sweep", "small-io", "-o", "/nonexistent-hetmem-dir/s.json"], "does not exist"),
    (
        ["run", "--mode", "dram", "--stats", "/nonexistent-hetmem-dir/s.json", "--", "true"],
        "--stats: directory",
    ),
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
    # hetmem run --placement (flat and hybrid modes)
    (["run", "--mode", "hybrid", "--fast-budget", "64M", "--", "true"], "needs --placement"),
    (
        [
            "run",
            "--mode",
            "cache",
            "--placement",
            "{tmp}/bad.toml",
            "--fast-budget",
            "64M",
            "--",
            "true",
        ],
        "--placement is for --mode flat or hybrid",
    ),
    (
        [
            "run",
            "--mode",
            "flat",
            "--placement",
            "{tmp}/bad.toml",
            "--fast-budget",
            "64M",
            "--",
            "true",
        ],
        "not valid TOML",
    ),
    # hetmem demo: the matrix options are refused before the probe runs
    (["demo", "--repeat", "0"], "--repeat"),
    (["demo", "--fits-repeat", "101"], "--fits-repeat"),
    (["demo", "--sizes", "big"], "--sizes"),
    (["demo", "--fast-budget", "lots"], "--fast-budget"),
    (["demo", "--fast-budget", "1M"], "at least 16MiB"),
    (["demo", "--storage", "/nonexistent-hetmem-dir"], "does not exist"),
    # hetmem bench kernels --kernel-min-time (the kernels' own --min-time is in test_kernels)
    (["bench", "kernels", "stream", "--kernel-min-time", "nan"], "--kernel-min-time"),
    (["bench", "kernels", "stream", "--kernel-min-time", "601"], "--kernel-min-time"),
    (["bench", "kernels", "stream", "--kernel-min-time", "soon"], "--kernel-min-time"),
    (["bench", "kernels", "stream", "--kernel-reps", "0"], "--kernel-reps"),
    # hetmem bench reference: --rounds 0 was taken as the default (falsy) and ran
    (["bench", "reference", "--rounds", "0"], "--rounds"),
    (["bench", "kernels", "stream", "--threads", "0"], "--threads"),
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
    (tmp_path / "bad.toml").write_text("this is: not [toml\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[:2] == ["bench", "kernels"] or argv[0] == "demo":
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


def _preload_env(tmp_path, extra: dict[str, str]) -> dict[str, str]:
    from hetmem.run.config import preload_path

    # none of the caller's HETMEM_* settings, only the library folder
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("HETMEM_") or k == "HETMEM_LIBDIR"
    }
    env["LD_PRELOAD"] = str(preload_path())
    env.update(extra)
    return env


# the interposer options of src/options.h, set directly (as hetmem profile and
# hetmem run do): refused at start, before the program's main, in one line
# naming the mode that could not start
EMPTY_TABLE = (
    "hetmem-placement-compact 1\ntiers 1\ntier 0 dram 0 0 node0\nmodules 0\nsites 0\nend\n"
)
PRELOAD_CASES = [
    ({"HETMEM_PROFILE": "{tmp}/p.%p", "HETMEM_SAMPLER": "bogus"}, "profile", "unknown sampler"),
    ({"HETMEM_PROFILE": "{tmp}/p.%p", "HETMEM_PROFILE_DEPTH": "0"}, "profile", "1..64"),
    ({"HETMEM_PROFILE": "{tmp}/p.%p", "HETMEM_PROFILE_DEPTH": "65"}, "profile", "1..64"),
    ({"HETMEM_PROFILE": "{tmp}/p.%p", "HETMEM_SAMPLE_PERIOD": "-5"}, "", "HETMEM_SAMPLE_PERIOD"),
    ({"HETMEM_PROFILE": "{tmp}/p.%p", "HETMEM_SAMPLE_PERIOD": "0"}, "profile", "sample_period"),
    ({"HETMEM_PROFILE": "{tmp}/no/p.%p"}, "profile", "cannot write the profile into"),
    ({"HETMEM_PLACEMENT": "{tmp}/missing.compact"}, "placement", "cannot read placement table"),
    ({"HETMEM_PLACEMENT": "{tmp}/t.compact", "HETMEM_PLACE_MODE": "weird"}, "placement", "weird"),
    ({"HETMEM_PLACEMENT": "{tmp}/t.compact", "HETMEM_PROFILE_DEPTH": "99"}, "placement", "1..64"),
    (
        {"HETMEM_PLACEMENT": "{tmp}/t.compact", "HETMEM_HUGE_PAGES": "sometimes"},
        "",
        "HETMEM_HUGE_PAGES",
    ),
    ({"HETMEM_PLACEMENT": "{tmp}/split-nosite.compact"}, "placement", "not there"),
    ({"HETMEM_PLACEMENT": "{tmp}/split-bad.compact"}, "placement", "bad split line"),
    ({"HETMEM_FAST_BUDGET": "64M", "HETMEM_STATICS": "perhaps"}, "", "HETMEM_STATICS"),
    ({"HETMEM_FAST_BUDGET": "64M", "HETMEM_BUDGET_PROCESS": "maybe"}, "", "HETMEM_BUDGET_PROCESS"),
]
# split lines (split placement): for a site the table lacks, and malformed
SITE_TABLE = EMPTY_TABLE.replace("modules 0\nsites 0\n", "modules 1\nmodule 0 - /bin/true\n"
                                 "sites 1\nsite 4 0 1 0:10\n")  # fmt: skip
SPLIT_TABLES = {
    "split-nosite.compact": SITE_TABLE.replace("end\n", "split 5 4096\nend\n"),
    "split-bad.compact": SITE_TABLE.replace("end\n", "split 4 lots\nend\n"),
}


@pytest.mark.parametrize(
    ("extra", "mode", "words"), PRELOAD_CASES, ids=[" ".join(c[0]) for c in PRELOAD_CASES]
)
def test_interposer_option_refused_at_start(tmp_path, extra, mode, words):
    import subprocess

    (tmp_path / "t.compact").write_text(EMPTY_TABLE)
    for name, text in SPLIT_TABLES.items():
        (tmp_path / name).write_text(text)
    extra = {k: v.replace("{tmp}", str(tmp_path)) for k, v in extra.items()}
    proc = subprocess.run(
        ["true"], env=_preload_env(tmp_path, extra), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert lines[0].startswith(f"hetmem: cannot start {mode}"), proc.stderr
    assert not list(tmp_path.glob("p.*"))


# issue 19, finding 9: tracebacks and late validation; finding 5: budgets
FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"
PROFILE = str(FUZZ / "profile" / "valid_two_sites")
NO_CMD = "/nonexistent-hetmem-dir/never-runs"


def _ram() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_advise_output_in_a_missing_folder_is_refused_before_solving(hetmem, tmp_path):
    # was a FileNotFoundError traceback after the solve
    out = tmp_path / "nonexistent" / "x.toml"
    proc = hetmem("advise", PROFILE, "--fast-budget", "16M", "-o", str(out), timeout=120)
    _assert_refused(proc, "does not exist")


def test_advise_storage_names_the_storage_tier(hetmem, tmp_path):
    proc = hetmem("advise", PROFILE, "--fast-budget", "16M", "--storage", "/nonexistent-hetmem",
                  timeout=120)  # fmt: skip
    _assert_refused(proc, "--storage /nonexistent-hetmem: not a directory")
    proc = hetmem("advise", PROFILE, "--fast-budget", "16M", "--storage", str(tmp_path),
                  "--tiers", str(tmp_path / "t.json"), timeout=120)  # fmt: skip
    _assert_refused(proc, "--storage and --tiers exclude each other")
    proc = hetmem("advise", PROFILE, "--fast-budget", "16M", "--storage", str(tmp_path), "--json",
                  timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = [t["name"] for t in json.loads(proc.stdout)["tiers"]]
    assert f"storage:{os.path.realpath(tmp_path)}" in names, names


def test_flow_run_of_a_binary_file_is_one_line(hetmem, tmp_path):
    # was a UnicodeDecodeError traceback
    spec = tmp_path / "spec.bin"
    spec.write_bytes(bytes(range(256)) * 8)
    proc = hetmem("flow", "run", str(spec), timeout=120)
    _assert_refused(proc, "not UTF-8")


def test_bench_sdm_refuses_a_bad_size_before_probing(hetmem, tmp_path):
    # the storage tier was probed (a minute) before 1Q was looked at
    proc = hetmem("bench", "sdm", "--fast-budget", "1Q", "--storage", str(tmp_path), timeout=120)
    assert "measuring" not in proc.stderr, proc.stderr
    _assert_refused(proc, "--fast-budget: '1Q' is not a size")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["advise", PROFILE, "--fast-budget", "{B}"],
        ["run", "--mode", "cache", "--fast-budget", "{B}", "--", NO_CMD],
        ["run", "--mode", "flat", "--placement", PROFILE, "--fast-budget", "{B}", "--", NO_CMD],
        ["bench", "kernels", "stream", "--fast-budget", "{B}", "-o", "{tmp}/out"],
        ["demo", "--fast-budget", "{B}", "-o", "{tmp}/out"],
    ],
    ids=["advise", "run-cache", "run-flat", "bench", "demo"],
)
@pytest.mark.parametrize("budget", ["0", "99999T", "2xRAM"])
def test_every_verb_checks_a_budget_alike_before_any_work(hetmem, tmp_path, argv, budget):
    # advise took 0 where run refused it; 1T and 99999T reached the runtime,
    # whose metadata grew with the budget (13 GB RSS, a hang, the OOM killer)
    text = str(2 * _ram()) if budget == "2xRAM" else budget
    argv = [a.replace("{B}", text).replace("{tmp}", str(tmp_path)) for a in argv]
    proc = hetmem(*argv, env={"HETMEM_BUDGET_OVER_RAM": ""}, timeout=120)
    words = "more than 0" if budget == "0" else "set HETMEM_BUDGET_OVER_RAM=1"
    _assert_refused(proc, f"--fast-budget {text}: ")
    assert words in proc.stderr
    assert not (tmp_path / "out").exists()


def test_budget_over_ram_is_allowed_when_asked(hetmem):
    text = str(2 * _ram())
    over = {"HETMEM_BUDGET_OVER_RAM": "1"}
    proc = hetmem("advise", PROFILE, "--fast-budget", text, "--json", env=over, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fast_budget_node_bytes"] == int(text)
    proc = hetmem("advise", PROFILE, "--fast-budget", text, env={"HETMEM_BUDGET_OVER_RAM": "maybe"})
    _assert_refused(proc, "HETMEM_BUDGET_OVER_RAM='maybe' is not a boolean")


@pytest.mark.parametrize("text", ["1" * 400, "9" * 310 + "T", ".5", "1.5"])
def test_huge_or_fractional_sizes_are_usage_errors(text):
    # a 309-digit number was float infinity, and int() of it an OverflowError
    with pytest.raises(UsageError):
        sizes.parse_size(text)


def test_budget_parser_bounds():
    ram = _ram()
    assert sizes.parse_budget(str(ram)) == ram
    for text in ("0", str(ram + 1), "0.0"):
        with pytest.raises(UsageError):
            sizes.parse_budget(text)
    with pytest.raises(UsageError, match="at least 16 MiB"):
        sizes.parse_budget("1M", minimum=16 << 20)


def test_placement_save_never_writes_through_a_symlink(tmp_path):
    # the temporary file was .NAME.tmpPID, opened with O_CREAT|O_TRUNC: a
    # symlink planted there (or at NAME) sent the placement into its target
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "x.toml"
    (tmp_path / f".x.toml.tmp{os.getpid()}").symlink_to(victim)
    out.symlink_to(victim)
    p = placement.parse_bytes((FUZZ / "placement" / "valid").read_bytes(), "seed")
    placement.save(p, out)
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and placement.load(out).sites == p.sites
    with pytest.raises(UsageError, match="cannot write"):
        placement.save(p, tmp_path / "missing" / "x.toml")


@pytest.mark.parametrize("budget", ["99999T", "0", "lots"])
def test_run_checks_a_budget_from_the_environment_too(hetmem, budget):
    proc = hetmem("run", "--mode", "cache", "--", NO_CMD, env={"HETMEM_FAST_BUDGET": budget})
    _assert_refused(proc, "HETMEM_FAST_BUDGET")


def test_run_checks_the_storage_full_policy_before_the_command(hetmem, tmp_path):
    """A bad HETMEM_STORAGE_FULL is refused by hetmem run before the command
    starts (the interposer would refuse it only inside the running command)."""
    marker = tmp_path / "ran"
    proc = hetmem(
        "run", "--mode", "cache", "--fast-budget", "64M", "--", "touch", str(marker),
        env={"HETMEM_STORAGE_FULL": "ignore"},
    )  # fmt: skip
    _assert_refused(proc, "HETMEM_STORAGE_FULL must be error or fallback, not 'ignore'")
    assert not marker.exists()
