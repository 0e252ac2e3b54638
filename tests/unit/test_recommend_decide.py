# SPDX-License-Identifier: BSD-3-Clause
"""hetmem recommend's answer from run records: the best mode that keeps to
the budget, its ratios with intervals, near ties and failures said, and the
reasons from the pager's counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem.commands import recommend as cmd
from hetmem.recommend import decide, plan, session
from hetmem.recommend.runs import Run, Setup
from hetmem.recommend.session import round_order
from hetmem.stats import ratio

BUDGET = 64 << 20
MODES = ["dram", "swap", "cache", "flat", "hybrid"]


def _setup() -> Setup:
    s = Setup(["./app", "x"], BUDGET, Path("/var/tmp"), Path("/tmp/w"))
    s.budget_text = "64M"
    s.placement = Path("/tmp/w/placement.toml")
    return s


def _runs(times: dict[str, list[float]], summary: dict | None = None) -> list[Run]:
    out = []
    for mode, ts in times.items():
        for i, t in enumerate(ts):
            st = {"pager_summary": summary} if summary and mode == "cache" else {}
            out.append(Run(mode, i + 1, 0, t, stats=st))
    return out


def test_the_fastest_mode_within_the_budget_wins_over_dram() -> None:
    runs = _runs({"dram": [1.0, 1.1, 0.9], "swap": [9.0, 8.0, 10.0],
                  "cache": [2.0, 2.1, 1.9], "flat": [3.0, 3.2, 2.9]})  # fmt: skip
    ans = decide.decide(runs, MODES, _setup(), 128 << 20, fits_budget=False)
    assert ans.mode == "cache"
    assert ans.vs_swap is not None and ans.vs_swap.value == pytest.approx(9.0 / 2.0)
    assert ans.vs_swap.significant_above_one
    assert ans.vs_dram is not None and ans.vs_dram.value == pytest.approx(0.5)
    assert ans.command.startswith("hetmem run --mode cache --fast-budget 64M --storage /var/tmp")
    assert ans.command.endswith("-- ./app x")
    assert "--placement" not in ans.command
    assert any("2.0x the budget" in w for w in ans.why)


def test_dram_is_the_answer_only_when_the_data_fits_the_budget() -> None:
    runs = _runs({"dram": [1.0, 1.0], "cache": [1.5, 1.4]})
    assert decide.decide(runs, MODES, _setup(), BUDGET // 2, fits_budget=True).mode == "dram"
    assert decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False).mode == "cache"


def test_flat_names_its_placement_and_a_near_tie_is_said() -> None:
    runs = _runs({"cache": [2.0, 2.2, 1.9], "flat": [1.9, 2.1, 1.95]})
    ans = decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False)
    assert ans.mode == "flat"
    assert "--placement /tmp/w/placement.toml" in ans.command
    assert ans.runner_up is not None and ans.runner_up[0] == "cache"
    assert any("within this machine's noise" in w for w in ans.why)


def test_a_mode_that_failed_every_run_is_said_and_not_chosen() -> None:
    runs = _runs({"cache": [5.0, 5.0]})
    runs.append(Run("swap", 1, 137, None, "killed by the OOM killer in its memory limit", "oom"))
    ans = decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False)
    assert ans.mode == "cache" and ans.vs_swap is None
    assert any(w.startswith("swap could not run it: killed by the OOM") for w in ans.why)


def test_a_mode_that_failed_some_runs_is_no_answer_beside_one_that_never_did() -> None:
    # swap survived one round of three, faster than cache in it
    runs = _runs({"cache": [5.0, 5.2, 5.1], "swap": [4.0]})
    oom = "killed by the OOM killer in its memory limit"
    runs += [Run("swap", r, 137, None, oom, "oom") for r in (2, 3)]
    ans = decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False)
    assert ans.mode == "cache", ans
    assert f"swap failed in 2 of 3 runs ({oom}): not an answer" in ans.why, ans.why
    # where every mode failed somewhere, the fastest of what ran is still said
    runs += [Run("cache", 4, 1, None, "exit code 1", "exit")]
    ans = decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False)
    assert ans.mode == "swap"
    assert "swap failed in 2 of 3 runs" in " ".join(ans.why)
    assert any(w.endswith("no mode completed every run") for w in ans.why), ans.why


def test_the_ratio_to_a_swap_that_failed_later_says_of_which_rounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a mode that fails runs no more: swap finished round 1, failed round 2
    runs = _runs({"cache": [5.0, 5.1], "swap": [6.0]})
    runs.append(Run("swap", 2, 137, None, "killed by the OOM killer in its memory limit", "oom"))
    opts = session.Options(["./app", "x"], BUDGET, Path("/var/tmp"), tmp_path, budget_text="64M")
    pilot = plan.Pilot(1.0, 2 * BUDGET, 2 * BUDGET, {})
    choice = plan.Choice(modes=["cache", "swap"])
    res = session.Result(opts, _setup(), pilot, choice, runs, rounds=2, seconds=20.0)
    res.answer = decide.decide(runs, MODES, _setup(), 2 * BUDGET, fits_budget=False)
    cmd._print(res)
    out = capsys.readouterr().out
    assert "Use cache." in out
    assert "faster than swap, in the rounds swap finished, by: 1.19x" in out, out
    assert "swap failed in 1 of 2 runs (killed by the OOM killer" in out, out


def test_no_successful_run_gives_no_answer() -> None:
    runs = [Run("cache", 1, 1, None, "exit code 1", "exit")]
    assert decide.decide(runs, MODES, _setup(), BUDGET, fits_budget=False).mode is None


@pytest.mark.parametrize(
    ("summary", "words"),
    [
        ({"faults_without_read": 0.97, "bytes_per_demand_fetch": 200000.0}, "streaming"),
        ({"faults_without_read": 0.04, "bytes_per_demand_fetch": 7000.0}, "random access"),
        ({"faults_without_read": 0.3, "bytes_per_demand_fetch": 500000.0}, "waited for a read"),
    ],
)
def test_the_access_pattern_comes_from_the_cache_runs(summary: dict, words: str) -> None:
    runs = _runs({"cache": [1.0, 1.0]}, {**summary, "times_read_back": 3.0})
    why = decide.reasons(runs, "cache", BUDGET, 2 * BUDGET, fits_budget=False)
    assert any(words in w for w in why), why
    assert any("read the data back 3.0 times" in w for w in why)


def test_the_blocks_read_back_most_are_a_reason() -> None:
    # a few arrays cycled through the cache: the answer says which
    arrays = {"block_bytes": 12 << 20, "blocks": 3, "bytes_read": 3 * 200 * (12 << 20),
              "times_read": 200.0}  # fmt: skip
    summary = {"times_read_back": 40.0, "bytes_read": 3 * 200 * (12 << 20) + (1 << 30),
               "read_back": [arrays]}  # fmt: skip
    why = decide.reasons(_runs({"cache": [1.0]}, summary), "cache", BUDGET, 2 * BUDGET, False)
    assert "in cache mode it read back most: 3 blocks of 12 MiB, 200 times each" in "\n".join(why)
    # read back once: nothing to name
    once = decide.reasons(_runs({"cache": [1.0]}, {**summary, "times_read_back": 1.1}),
                          "cache", BUDGET, 2 * BUDGET, False)  # fmt: skip
    assert not any("read back most" in w for w in once)


def test_ratio_interval_holds_the_value_and_needs_two_runs() -> None:
    r = ratio([4.0, 4.4, 3.9], [2.0, 2.1, 1.9])
    assert r.lo is not None and r.hi is not None and r.lo <= r.value <= r.hi
    assert r.value == pytest.approx(2.0)
    single = ratio([4.0], [2.0, 2.1])
    assert single.lo is None and "no CI" in single.text()
    with pytest.raises(ValueError):
        ratio([], [1.0])


def test_rounds_rotate_so_no_mode_always_runs_first() -> None:
    modes = ["dram", "cache", "flat"]
    firsts = {round_order(modes, r)[0] for r in range(3)}
    assert firsts == set(modes)
    assert sorted(round_order(modes, 5)) == sorted(modes)


def test_modes_are_left_out_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "machine_memory", lambda: 1 << 30)
    monkeypatch.setattr(plan.harness, "available_modes",
                        lambda: {m: "" for m in MODES} | {"swap": "needs root"})  # fmt: skip
    big = plan.Pilot(1.0, 900 << 20, 900 << 20, {})
    c = plan.choose(big, BUDGET, MODES)
    assert c.modes == ["cache"]
    assert c.skipped["swap"] == "needs root"
    assert "does not fit" in c.skipped["dram"] and "profile run" in c.skipped["flat"]
    small = plan.Pilot(1.0, 32 << 20, 30 << 20, {})
    c = plan.choose(small, BUDGET, MODES)
    assert c.modes == ["dram", "cache", "flat", "hybrid"] and c.fits_budget


def test_memory_hetmem_does_not_tier_is_a_reason() -> None:
    """The cache runs' memory outside the pager, from a quarter of the
    budget up, is a reason (bwa mem: 87 of 128 MiB); a stopped cache run's
    summary counts when no cache run ended."""
    runs = _runs({"dram": [1.0, 1.0], "cache": [1.2, 1.3]})
    for r in runs:
        if r.mode == "cache":
            r.stats = {"pager_summary": {"outside_peak_bytes": 48 << 20}}
    why = decide.reasons(runs, "cache", BUDGET, 2 * BUDGET, fits_budget=False)
    assert any("took 48 MiB of the budget" in w for w in why), why
    for r in runs:
        r.stats = {"pager_summary": {"outside_peak_bytes": 8 << 20}}
    quiet = decide.reasons(runs, "cache", BUDGET, 2 * BUDGET, fits_budget=False)
    assert not any("does not tier" in w for w in quiet)
    stopped = [r for r in runs if r.mode == "dram"] + [
        Run("cache", 0, -1, None, "over the time limit (5 s)", "timeout",
            {"pager_summary": {"outside_peak_bytes": 40 << 20, "times_read_back": 9.0}})
    ]  # fmt: skip
    why = decide.reasons(stopped, "dram", BUDGET, 2 * BUDGET, fits_budget=False)
    assert any("took 40 MiB" in w for w in why) and any("9.0 times" in w for w in why), why


def test_the_commands_memory_counts_what_the_pager_left_outside() -> None:
    """bwa mem at 203 MiB: 129 MiB in large blocks and 135 MiB of smaller
    ones; "the data is 0.6x the budget" hid that it was 1.3x."""
    pilot = plan.Pilot(28.0, 129 << 20, 120 << 20, {"outside_peak_bytes": 135 << 20})
    assert pilot.memory_bytes == 264 << 20
    runs = _runs({"swap": [1.0, 1.0], "cache": [1.2, 1.3]})
    why = decide.reasons(runs, "swap", 203 << 20, pilot.memory_bytes, fits_budget=False)
    assert "the command's memory (264 MiB) is 1.3x the budget (203 MiB)" in why, why
    # no pager opened (no large block): all it held is its peak RSS
    none = plan.Pilot(1.0, 0, 0, {}, max_rss=50 << 20)
    assert none.memory_bytes == 50 << 20


def test_dram_fits_the_budget_only_with_all_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "machine_memory", lambda: 1 << 34)
    monkeypatch.setattr(plan.harness, "available_modes", lambda: {m: "" for m in MODES})
    small_but_held = plan.Pilot(1.0, 8 << 20, 8 << 20, {}, max_rss=4 * BUDGET)
    assert not plan.choose(small_but_held, BUDGET, MODES).fits_budget
    small = plan.Pilot(1.0, 8 << 20, 8 << 20, {}, max_rss=BUDGET // 2)
    assert plan.choose(small, BUDGET, MODES).fits_budget


def test_the_first_run_says_how_long_the_rest_takes() -> None:
    pilot = plan.Pilot(60.0, 1 << 30, 1 << 30, {})
    choice = plan.Choice(modes=["dram", "cache", "flat", "hybrid"])
    opts = session.Options(["./app"], BUDGET, Path("/var/tmp"), Path("/tmp/w"), time_s=300.0)
    text = session._estimate(pilot, choice, opts)
    # 2 rounds x 4 modes + the profile run, 60 s each: 9 min
    assert "about 9.0 min" in text and "beyond --time 5.0 min" in text
    opts.time_s = 3600.0
    assert "beyond" not in session._estimate(pilot, choice, opts)


def test_the_swap_size_is_written_as_a_user_would() -> None:
    """The swap file holds twice the data, rounded up to whole MiB, and
    the command line says 382M, not 400556032."""
    pilot = plan.Pilot(1.0, 200_000_001, 0, {})
    size = plan.swap_size(pilot, BUDGET)
    assert size == 382 << 20 and size >= 2 * pilot.data_bytes
    setup = Setup(["./app"], BUDGET, Path("/tmp"), Path("/tmp"), swap_size=size)
    assert "--swap-size 382M" in setup.command_line("swap")
    setup.swap_size = 3 << 30
    assert "--swap-size 3G" in setup.command_line("swap")


def test_each_placed_mode_runs_with_its_own_placement() -> None:
    # hybrid's placement counts the pager's cache (advise --for hybrid)
    s = _setup()
    s.placement_hybrid = Path("/tmp/w/placement-hybrid.toml")
    assert "--placement /tmp/w/placement.toml" in s.command_line("flat")
    assert "--placement /tmp/w/placement-hybrid.toml" in s.command_line("hybrid")
    assert "--placement" not in s.command_line("cache")
    assert plan.PLACEMENT_FILES == {"flat": "placement.toml", "hybrid": "placement-hybrid.toml"}


def test_a_failed_first_run_too_large_for_ram_is_not_run_plainly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After a first run that exits nonzero, a plain (dram) run tells whose
    fault it is, but not when the data it reached does not fit this
    machine's memory: that run could take the node's memory from others."""
    ran: list[str] = []
    monkeypatch.setattr(session, "run_once", lambda _s, mode, _r: ran.append(mode))
    monkeypatch.setattr(plan, "machine_memory", lambda: 4 << 30)
    stats = {"interposer": {"peak_live_large_bytes": 10 << 30}}
    run = Run("cache", 0, 1, None, "boom", "exit", stats)
    setup = Setup(["app"], 1 << 30, tmp_path, tmp_path)
    with pytest.raises(session.NoAnswer, match=r"not run without hetmem: its data \(10 GiB\)"):
        session._first_failed(run, setup)
    assert ran == []
    # it fits: the plain run is made (here it fails too)
    stats["interposer"]["peak_live_large_bytes"] = 1 << 30
    monkeypatch.setattr(
        session, "run_once", lambda _s, mode, _r: Run(mode, 0, 1, None, "boom", "exit")
    )
    with pytest.raises(session.NoAnswer, match="fails without hetmem too"):
        session._first_failed(run, setup)
