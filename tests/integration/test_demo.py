# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem demo`, small: every step runs (probe, tiers, the kernel matrix,
hetmem recommend on the placement workload), and its exit status is the
benches' rule applied to what it printed."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import needs_pager, run_hetmem
from hetmem.bench import exit_status, matrix

pytestmark = needs_pager


def test_small_demo_runs_every_step_and_judges_itself(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_hetmem("demo", "--fast-budget", "16MiB", "--sizes", "2x", "--repeat", "1",
                      "--fits-repeat", "1", "--kernels", "stream-triad",
                      "--rounds", "1", "--storage", str(tmp_path), "-o", str(out),
                      "--json", timeout=900)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    d = json.loads(proc.stdout[proc.stdout.index('{\n  "schema_version": 2') :])
    assert d["exit_status"] == proc.returncode
    report = json.loads((out / "report.json").read_text())
    rec = d["recommendation"]
    # the rule: a missed matrix target or no recommendation gives 1
    assert proc.returncode == exit_status([*matrix.targets_of(report), rec is not None])
    assert [s["case"] for s in d["summary"]] == ["stream-triad"]
    assert rec is not None, proc.stderr[-3000:]
    assert {"flat", "cache"} <= set(rec["modes"]), rec["skipped"]
    # hybrid too, unless its placement pins nothing (then it is cache mode)
    assert "hybrid" in rec["modes"] or "cache mode" in rec["skipped"]["hybrid"], rec["skipped"]
    assert rec["answer"]["mode"] in rec["modes"]
    assert (out / "recommend" / "placement.toml").is_file()
    assert (out / "report.html").is_file()
