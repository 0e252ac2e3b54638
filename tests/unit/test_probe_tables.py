# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem probe`'s tables: each figure shown once, where it belongs."""

from __future__ import annotations

import io

from rich.console import Console

from hetmem import output, probe


def _tier(name: str, latency: float, triads: list[float]) -> dict:
    return {
        "name": name,
        "kind": "memory",
        "latency_ns": latency,
        "latency_buffer_bytes": 64 << 20,
        "stream": [
            {"threads": i + 1, "copy_gbs": 1.0, "scale_gbs": 2.0, "add_gbs": 3.0, "triad_gbs": t}
            for i, t in enumerate(triads)
        ],
    }


def test_latency_is_shown_once_per_tier_not_per_thread_row(monkeypatch):
    # the latency is one thread's pointer chase, measured once per tier; it
    # was repeated on every STREAM thread row as if it were per thread count
    buf = io.StringIO()
    monkeypatch.setattr(output, "_console", Console(file=buf, width=200, highlight=False))
    probe.print_tables(
        {"tiers": [_tier("node0", 97.25, [11.5, 21.5, 26.5]), _tier("node1", 143.75, [7.5, 9.5])]}
    )
    text = buf.getvalue()
    assert text.count("97.2") == 1 and text.count("143.8") == 1, text
    stream, latency = text.split("memory idle latency")
    assert "97.2" not in stream and "latency" not in stream
    assert "26.5" in stream and "64 MiB" in latency and "1 thread" in latency
    rows = [ln for ln in latency.splitlines() if "node" in ln]
    assert len(rows) == 2 and "97.2" in rows[0] and "143.8" in rows[1]


def test_no_latency_table_without_a_latency(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(output, "_console", Console(file=buf, width=200, highlight=False))
    t = _tier("node0", 0.0, [11.5])
    del t["latency_ns"]
    probe.print_tables({"tiers": [t]})
    assert "11.5" in buf.getvalue() and "latency" not in buf.getvalue()
