# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem recommend` end to end on a real kernel, and its bad input."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem
from hetmem.bench.kernels import kernel_path
from hetmem.placement import fileformat as placement_mod
from hetmem.recommend import session

pytestmark = needs_pager


def _stream(tmp_path: Path, reps: int = 2) -> list[str]:
    return [str(kernel_path("stream")), "--bytes", "48M", "--reps", str(reps), "--threads", "2"]


def test_recommend_answers_with_a_command_that_runs(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(out)]
    proc = run_hetmem("recommend", *opts, "--rounds", "2", "--modes", "dram,cache,flat",
                      "--json", "--", *_stream(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["schema_version"] == 1 and d["kind"] == "hetmem-recommend"
    assert d["first_run"]["data_bytes"] >= 40 << 20
    assert d["first_run"]["max_rss_bytes"] > 0
    assert not d["fits_budget"]
    # dram is the reference, not a candidate: the data is 3x the budget
    assert d["answer"]["mode"] in ("cache", "flat")
    assert len(d["modes"]["dram"]["seconds"]) == 2
    assert d["answer"]["vs_dram"]["ci_low"] is not None
    assert (out / "placement.toml").is_file()
    assert json.loads((out / "recommend.json").read_text())["answer"] == d["answer"]
    assert (out.stat().st_mode & 0o077) == 0
    line = shlex.split(d["answer"]["command"])
    assert line[:2] == ["hetmem", "run"] and "--fast-budget" in line and "16M" in line
    again = run_hetmem(*line[1:])
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["verified"]


def test_the_profile_run_takes_the_runs_threshold(tmp_path: Path) -> None:
    # flat and hybrid run with --threshold, so the placement they apply must
    # come from a profile with the same threshold: at the default (1 MiB),
    # blocks of 256 KiB-1 MiB would match no site and go to the slowest tier
    out = tmp_path / "rec"
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(out)]
    modes = ["--modes", "dram,flat,hybrid"]
    proc = run_hetmem("recommend", *opts, "--threshold", "256K", "--rounds", "1", *modes,
                      "--json", "--", *_stream(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # each placed mode ran with its own placement (advise --for MODE)
    for mode, name in (("flat", "placement.toml"), ("hybrid", "placement-hybrid.toml")):
        assert f'for_mode = "{mode}"' in (out / name).read_text()
        assert (out / "logs" / f"advise-{mode}.err").is_file()
    profiles = sorted((out / "profile").glob("run.prof.*"))
    assert profiles
    for prof in profiles:
        header = json.loads(prof.read_text().splitlines()[0])
        assert header["type"] == "header" and header["threshold"] == 256 << 10
    line = shlex.split(json.loads(proc.stdout)["answer"]["command"])
    assert line[line.index("--threshold") + 1] == str(256 << 10)


@pytest.mark.skipif(not (CBUILD / "hm_small_target").exists(), reason="hm_small_target not built")
def test_small_blocks_outside_the_pager_are_measured_with_the_heap(tmp_path: Path) -> None:
    # 48 MiB of small blocks at a 16 MiB budget: the first run leaves them
    # outside the pager, so cache mode is measured with --small-blocks too
    # (cache-small); plain cache kept them in DRAM, three times the budget,
    # and is no candidate: the answer is cache-small, within the budget
    out = tmp_path / "rec"
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(out)]
    target = [str(CBUILD / "hm_small_target"), "mix", "48", "2", "2"]
    proc = run_hetmem("recommend", *opts, "--rounds", "1", "--modes", "cache,dram", "--json",
                      "--", *target)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert set(d["modes"]) == {"dram", "cache", "cache-small"}
    assert len(d["modes"]["cache-small"]["seconds"]) == 1
    assert d["answer"]["mode"] == "cache-small"
    line = shlex.split(d["answer"]["command"])
    assert line[:4] == ["hetmem", "run", "--mode", "cache"] and "--small-blocks" in line
    assert any(w.startswith("cache is not a candidate") for w in d["answer"]["why"])
    stats = json.loads((out / "logs" / "cache-small.stats.json").read_text())
    assert stats["pager"]["counters"]["other_peak_bytes"] < 16 << 20


def test_recommend_prints_the_answer_and_why(tmp_path: Path) -> None:
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(tmp_path / "r")]
    proc = run_hetmem("recommend", *opts, "--rounds", "1", "--modes", "cache,dram",
                      "--", *_stream(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Use cache." in proc.stdout
    assert "hetmem run --mode cache --fast-budget 16M" in proc.stdout
    assert "the budget (16 MiB)" in proc.stdout


def test_hybrid_that_pins_nothing_is_not_run_beside_cache(tmp_path: Path) -> None:
    # STREAM's three 16 MiB arrays, swept together, at a 16 MiB budget: no
    # pin is worth the cache it takes, so hybrid would be cache mode again.
    # Eight repetitions, not two: a fresh-clone run's profile of two counted
    # one array 3.7x the others (215808 sampled accesses against 58496 and
    # 57984; alone they are within 10%), and a head of it was worth its
    # cache by the advisor's model
    out = tmp_path / "rec"
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(out)]
    proc = run_hetmem("recommend", *opts, "--rounds", "1", "--modes", "cache,hybrid",
                      "--json", "--", *_stream(tmp_path, reps=8))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert placement_mod.load(out / "placement-hybrid.toml").pins_nothing
    assert "hybrid" not in d["modes"] and "cache mode" in d["skipped"]["hybrid"]
    assert not [r for r in d["runs"] if r["mode"] == "hybrid"]
    assert d["answer"]["mode"] == "cache"
    # bench budgets measures it all the same: the tie is shown, not assumed
    o = session.Options(argv=_stream(tmp_path), budget=16 << 20, storage=tmp_path,
                        workdir=tmp_path / "bench", rounds=1, modes=("cache", "hybrid"),
                        hybrid_as_cache_runs=True)  # fmt: skip
    res = session.recommend(o)
    assert "hybrid" in res.choice.modes and "hybrid" not in res.choice.skipped
    assert [r.ok for r in res.runs if r.mode == "hybrid"] == [True]


def test_a_command_that_always_fails_gets_no_answer(tmp_path: Path) -> None:
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(tmp_path / "r")]
    proc = run_hetmem("recommend", *opts, "--", "false")
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "fails without hetmem too" in errors[0], proc.stderr
    assert "dram mode, exit status 1, no message on stderr" in errors[0]
    assert proc.stderr.splitlines()[-1] == errors[0]
    assert (tmp_path / "r" / "logs" / "dram.out").exists()


def test_a_command_that_fails_only_under_hetmem_is_said_to(tmp_path: Path) -> None:
    """The first run's failure is checked with one plain run: a command that
    fails only with the interposer loaded is reported as hetmem's problem,
    with its message and where its logs are."""
    script = 'case "$LD_PRELOAD" in *hetmem*) echo broken here >&2; exit 3;; esac'
    out = tmp_path / "r"
    opts = ["--fast-budget", "16M", "--storage", str(tmp_path), "-o", str(out)]
    proc = run_hetmem("recommend", *opts, "--", "sh", "-c", script)
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert "first run (cache mode, exit 3: broken here)" in last, last
    assert "runs to the end without hetmem" in last and str(out / "logs" / "cache.err") in last


def test_a_first_run_past_time_is_stopped_and_leaves_nothing_running(tmp_path: Path) -> None:
    """A command that never ends in cache mode (here: one that waits
    whenever the interposer is loaded, as bwa mem did at half its
    footprint) is stopped at --time: cache counts as failed with
    error_kind timeout, the other modes still answer, and the program the
    command's shell started does not run on after its shell was stopped."""
    pidf = tmp_path / "child.pid"
    script = f'case "$LD_PRELOAD" in *hetmem*) sleep 120 & echo $! > {pidf}; wait;; esac; echo ok'
    opts = ["--fast-budget", "64M", "--storage", str(tmp_path), "-o", str(tmp_path / "r")]
    t0 = time.monotonic()
    proc = run_hetmem("recommend", *opts, "--time", "5s", "--modes", "cache,dram", "--json",
                      "--", "sh", "-c", script)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 100  # its child's sleep 120 was not waited for
    d = json.loads(proc.stdout)
    assert d["answer"]["mode"] == "dram" and len(d["modes"]["dram"]["seconds"]) >= 2
    cache = d["modes"]["cache"]
    assert cache["seconds"] == [] and cache["error_kind"] == "timeout", cache
    assert [r["round"] for r in d["runs"] if r["mode"] == "cache"] == [0]
    assert d["first_run"]["seconds"] == 5.0
    assert any("cache could not run it: over the time limit" in w for w in d["answer"]["why"])
    pid = int(pidf.read_text())
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the command's child {pid} still runs")


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--", "true"], 2, "--fast-budget is needed"),
        (["--fast-budget", "16M", "--time", "soon", "--", "true"], 2, "--time"),
        (["--fast-budget", "16M", "--modes", "turbo", "--", "true"], 2, "turbo"),
        (["--fast-budget", "16M", "--rounds", "0", "--", "true"], 2, "--rounds"),
        (["--fast-budget", "16M", "--threshold", "100", "--", "true"], 2, "at least one page"),
        (["--fast-budget", "16M", "--", "no-such-program-xyz"], 127, "not found"),
        (["--fast-budget", "16M"], 2, "no command given: hetmem recommend [OPTIONS] --"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], code: int, words: str) -> None:
    proc = run_hetmem("recommend", "-o", str(tmp_path / "r"), *args)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_threshold_below_a_page_is_refused_before_the_folder_is_made(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = run_hetmem("recommend", "--fast-budget", "16M", "--threshold", "1K", "-o", str(out),
                      "--", "true")  # fmt: skip
    assert proc.returncode == 2 and "--threshold must be at least one page" in proc.stderr
    assert not out.exists()


def test_output_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    proc = run_hetmem("recommend", "--fast-budget", "16M", "-o", str(f), "--", "true")
    assert proc.returncode == 2 and "is a file" in proc.stderr
    assert f.read_text() == "x"


def test_an_output_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    proc = run_hetmem("recommend", "--fast-budget", "16M", "-o", str(shared), "--", "true")
    assert proc.returncode == 2 and "chmod go-w" in proc.stderr
    assert list(shared.iterdir()) == []
