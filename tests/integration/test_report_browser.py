# SPDX-License-Identifier: BSD-3-Clause
"""The report page in a real headless browser (Debian's Chromium): it loads
without errors, fetches nothing from the network, and shows every plot."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import _plan, _record
from hetmem.bench import harness, report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def _build_page(tmp_path):
    plan = _plan(tmp_path / "res", repeat=2)
    harness.write_manifest(plan, ["bench"])
    recs = []
    for rep in range(2):
        for mult in (0.5, 2.0, 4.0):
            for mode, slow in (("dram", 1.0), ("cache", 3.0), ("swap", 9.0)):
                t = 1.0 + 0.1 * rep if mult < 1 else (1.0 + 0.1 * rep) * slow * mult
                recs.append(_record("stream-triad", mult, mode, rep, t))
                res = {"degree": 1024, "variant": "ro", "gflops": 20.0 / (slow if mult > 1 else 1)}
                r = _record("poly-ro-d1024", mult, mode, rep, t, result=res)
                r["kernel"] = "poly"
                recs.append(r)
    (tmp_path / "res" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    page, data = report.build([tmp_path / "res"])
    path = tmp_path / "report.html"
    path.write_text(page)
    return path, page, data


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make test installs it)")
def test_report_loads_in_chromium_and_shows_every_plot(tmp_path):
    path, page, _ = _build_page(tmp_path)
    # Self-contained: no script, stylesheet or image is fetched from anywhere.
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", page)
    proc = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    n_plots = page.count("<figure class='plot'>")
    assert n_plots >= 3
    assert dom.count('<figure class="plot">') == n_plots
    # Each figure holds a rendered SVG with drawn paths, not an empty box.
    figures = re.findall(r'<figure class="plot">(.*?)</figure>', dom, flags=re.S)
    assert all("<svg" in f and f.count("<path") > 10 for f in figures)
    errors = [
        ln
        for ln in proc.stderr.splitlines()
        if "CONSOLE" in ln or "Failed to load resource" in ln or "Uncaught" in ln
    ]
    assert not errors, errors
    shot = tmp_path / "page.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile2'}",
            f"--screenshot={shot}",
            "--window-size=1300,2400",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and shot.stat().st_size > 20_000
