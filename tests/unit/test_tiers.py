# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem tiers`: golden sysfs trees, bad input, the live machine, probe merging.

The golden trees live in tests/golden/<machine>/ (built by
tests/golden/make_trees.py); expected.json beside each is the reviewed
inventory. HM_UPDATE_GOLDEN=1 rewrites the expected files instead of
comparing (review the diff before committing it).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from hetmem.commands import tiers as tiers_cmd
from hetmem.run import cache
from hetmem.tiers import inventory, merge_probe

GOLDEN = REPO / "tests" / "golden"
MACHINES = sorted(p.name for p in GOLDEN.iterdir() if (p / "sys").is_dir())
KEYS = {"name", "kind", "numa_node", "capacity_bytes", "cpus", "rank", "source"}
KINDS = {"dram", "hbm", "pmem", "cxl", "gpu", "storage", "unknown"}


def _tiers_json(hetmem, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = hetmem("tiers", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_all_required_machines_are_recorded():
    assert {
        "vm",
        "optane-kmem",
        "xeon-max-flat-snc4",
        "cxl-expander",
        "grace-hopper",
        "malformed",
    } <= set(MACHINES)


@pytest.mark.parametrize("machine", MACHINES)
def test_golden(hetmem, machine: str):
    root = GOLDEN / machine
    data = _tiers_json(hetmem, "--fsroot", str(root), "--no-storage", "--no-probe")
    assert data.pop("fsroot") == str(root)
    expected_path = root / "expected.json"
    if os.environ.get("HM_UPDATE_GOLDEN") == "1":
        expected_path.write_text(json.dumps(data, indent=2) + "\n")
    expected = json.loads(expected_path.read_text())
    assert data == expected
    # Invariants that hold whatever the expected file says.
    assert data["schema_version"] == 1
    ranks = [t["rank"] for t in data["tiers"]]
    assert ranks == list(range(len(ranks)))
    for t in data["tiers"]:
        assert KEYS <= t.keys()
        assert t["kind"] in KINDS
        assert isinstance(t["cpus"], list)
        assert t["kind"] != "storage"


def _kinds(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["name"], t["kind"]) for t in data["tiers"]]


def test_xeon_max_hbm_ranks_first_despite_distance(hetmem):
    data = _tiers_json(hetmem, "--fsroot", str(GOLDEN / "xeon-max-flat-snc4"), "--no-storage")
    assert data["ranking"] == "hmat"
    first = data["tiers"][0]
    assert first["kind"] == "hbm" and first["cpus"] == []
    # The trap: the local DDR node is nearer than the HBM node by SLIT.
    ddr0 = next(t for t in data["tiers"] if t["name"] == "node0")
    assert ddr0["distances"]["0"] < ddr0["distances"]["8"]
    assert [t["kind"] for t in data["tiers"]] == ["hbm"] * 8 + ["dram"] * 8


def test_kinds_of_constructed_machines(hetmem):
    def kinds(machine: str) -> list[tuple[str, str]]:
        return _kinds(_tiers_json(hetmem, "--fsroot", str(GOLDEN / machine), "--no-storage"))

    assert kinds("optane-kmem") == [
        ("node0", "dram"),
        ("node1", "dram"),
        ("node2", "pmem"),
        ("node3", "pmem"),
    ]
    assert kinds("cxl-expander") == [("node0", "dram"), ("node1", "dram"), ("node2", "cxl")]
    assert kinds("grace-hopper") == [("node0", "dram"), ("node1", "gpu")]
    assert kinds("malformed") == [("node0", "dram"), ("node1", "unknown"), ("node2", "unknown")]


def test_fsroot_from_environment(hetmem):
    data = _tiers_json(hetmem, "--no-storage", env={"HETMEM_FSROOT": str(GOLDEN / "cxl-expander")})
    assert len(data["tiers"]) == 3


def test_table_output(hetmem):
    proc = hetmem("tiers", "--fsroot", str(GOLDEN / "malformed"), "--no-storage")
    assert proc.returncode == 0, proc.stderr
    assert "unknown" in proc.stdout
    assert "node2/cpulist: unreadable or malformed" in proc.stdout


# ---------------------------------------------------------------------------
# Bad input: one line, exit code 2, no traceback
# ---------------------------------------------------------------------------


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert needle in proc.stderr


def test_bad_fsroot(hetmem, tmp_path: Path):
    _one_line_error(hetmem("tiers", "--fsroot", str(tmp_path / "nope")), str(tmp_path / "nope"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    _one_line_error(hetmem("tiers", "--fsroot", str(afile)), "Not a directory")
    # A directory, but no sysfs tree in it.
    _one_line_error(hetmem("tiers", "--fsroot", str(tmp_path)), "/sys/devices/system/node")


def test_bad_storage(hetmem, tmp_path: Path):
    missing = tmp_path / "missing"
    _one_line_error(hetmem("tiers", "--storage", str(missing)), f"'{missing}' does not exist")
    afile = tmp_path / "afile"
    afile.write_text("x")
    _one_line_error(hetmem("tiers", "--storage", str(afile)), "is not a directory")


def test_read_only_storage(hetmem, tmp_path: Path):
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        _one_line_error(hetmem("tiers", "--storage", str(ro)), "read-only filesystem")
    finally:
        subprocess.run(["umount", str(ro)], check=True)


# ---------------------------------------------------------------------------
# The live machine
# ---------------------------------------------------------------------------


def test_live_machine(hetmem, tmp_path: Path):
    data = _tiers_json(hetmem, "--storage", str(tmp_path), "--no-probe")
    node0 = data["tiers"][0]
    assert node0["name"] == "node0" and node0["kind"] == "dram" and node0["rank"] == 0
    assert node0["capacity_bytes"] > 0 and node0["cpus"]
    assert "hwloc" in node0["source"]  # cross-checked on the live machine
    storage = data["tiers"][-1]
    assert storage["kind"] == "storage" and storage["numa_node"] is None
    assert storage["path"] == str(tmp_path.resolve())
    assert isinstance(storage["o_direct"], bool)
    assert storage["free_bytes"] <= storage["capacity_bytes"]
    assert list(tmp_path.iterdir()) == []  # the O_DIRECT check left nothing


def test_default_storage_and_duplicates(hetmem, tmp_path: Path):
    data = _tiers_json(hetmem, "--no-probe", env={"HETMEM_STORAGE": str(tmp_path)})
    assert [t["path"] for t in data["tiers"] if t["kind"] == "storage"] == [str(tmp_path)]
    data = _tiers_json(hetmem, "--no-probe", "--storage", str(tmp_path), "--storage", str(tmp_path))
    assert sum(t["kind"] == "storage" for t in data["tiers"]) == 1


# ---------------------------------------------------------------------------
# Probe results outrank ratings
# ---------------------------------------------------------------------------


def test_merge_probe_reranks_measured_tiers():
    data = inventory(fsroot=str(GOLDEN / "cxl-expander"), no_storage=True, use_probe=False)
    assert [t["name"] for t in data["tiers"]] == ["node0", "node1", "node2"]
    probe = {
        "schema_version": 1,
        "tiers": [
            {"name": "node0", "kind": "memory", "best": {"triad_gbs": 90.0, "threads": 2}},
            {
                "name": "node1",
                "kind": "memory",
                "stream": [{"threads": 1, "triad_gbs": 60.0}, {"threads": 2, "triad_gbs": 120.0}],
            },
        ],
    }
    merge_probe(data, probe)
    # Measured tiers swap within their places; the unmeasured CXL node stays last.
    assert [t["name"] for t in data["tiers"]] == ["node1", "node0", "node2"]
    assert [t["rank"] for t in data["tiers"]] == [0, 1, 2]
    assert "probe" in data["tiers"][0]["source"]
    assert data["tiers"][0]["ranked_by"] == "probe"
    assert data["tiers"][2]["ranked_by"] == "memory_tier"
    assert data["ranking"] == "probe,memory_tier"


def test_merge_probe_ignores_other_schema():
    data = inventory(fsroot=str(GOLDEN / "grace-hopper"), no_storage=True, use_probe=False)
    before = [t["name"] for t in data["tiers"]]
    merge_probe(data, {"schema_version": 99, "tiers": []})
    assert [t["name"] for t in data["tiers"]] == before
    assert data["probe"]["used"] is False


def test_cli_merges_cached_probe(hetmem, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HETMEM_CACHE_DIR", str(tmp_path))
    storage = tmp_path / "scratch"
    storage.mkdir()
    cache.save(
        "probe",
        {
            "schema_version": 1,
            "tiers": [
                {"name": "node0", "kind": "dram", "stream": {"triad_gbs": 70.5}},
                # given as a non-canonical path: matched after resolving
                {
                    "name": "storage:x",
                    "kind": "storage",
                    "path": str(storage / ".." / "scratch"),
                    "seq_read_gbs": 2.5,
                },
            ],
        },
    )
    env = {"HETMEM_CACHE_DIR": str(tmp_path)}
    data = _tiers_json(hetmem, "--storage", str(storage), env=env)
    node0, st = data["tiers"][0], data["tiers"][-1]
    assert node0["measured_gbs"] == 70.5 and "probe" in node0["source"]
    assert st["measured_gbs"] == 2.5 and "probe" in st["source"]
    table = hetmem("tiers", "--storage", str(storage), env={**env, "COLUMNS": "200"})
    assert "70.5 triad" in table.stdout
    # A recorded tree is another machine: this machine's probe is not merged.
    data = _tiers_json(hetmem, "--fsroot", str(GOLDEN / "vm"), "--no-storage", env=env)
    assert all("probe" not in t["source"] for t in data["tiers"])


def test_hbw_nodes_override_what_the_firmware_says(hetmem):
    """HETMEM_HBW_NODES (else memkind's MEMKIND_HBW_NODES) names the
    high-bandwidth nodes: they become HBM and rank first."""
    root = str(GOLDEN / "cxl-expander")

    def tiers(env: dict[str, str]) -> dict[str, dict[str, Any]]:
        data = _tiers_json(hetmem, "--fsroot", root, "--no-storage", env=env)
        return {t["name"]: t for t in data["tiers"]}

    plain = tiers({})
    assert plain["node1"]["kind"] == "dram" and plain["node1"]["rank"] == 1
    for env in ({"HETMEM_HBW_NODES": "1"}, {"MEMKIND_HBW_NODES": "1"},
                {"HETMEM_HBW_NODES": "1", "MEMKIND_HBW_NODES": "0"}):  # fmt: skip
        got = tiers(env)
        n1 = got["node1"]
        assert n1["kind"] == "hbm" and n1["rank"] == 0, (env, n1)
        assert n1["ranked_by"] == "override" and "override" in n1["source"]
        assert got["node0"]["kind"] == "dram" and got["node0"]["rank"] == 1
        assert "override" not in got["node0"]["source"]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"HETMEM_HBW_NODES": "x"}, "HETMEM_HBW_NODES 'x': expected a node list"),
        ({"HETMEM_HBW_NODES": "2-1"}, "expected a node list"),
        ({"MEMKIND_HBW_NODES": "9"}, "MEMKIND_HBW_NODES '9': node 9 is not a memory node"),
    ],
)
def test_bad_hbw_nodes_are_one_line_errors(hetmem, env: dict[str, str], says: str):
    root = str(GOLDEN / "cxl-expander")
    _one_line_error(hetmem("tiers", "--fsroot", root, "--no-storage", env=env), says)


def test_table_labels_each_figure_for_what_was_measured(hetmem, tmp_path: Path, monkeypatch):
    # the triad figure was labelled "read bandwidth", the storage tier's
    # sequential O_DIRECT read alike, and both just "probe"
    storage = tmp_path / "scratch"
    storage.mkdir()
    node0 = {"name": "node0", "kind": "dram", "stream": {"triad_gbs": 70.5}, "latency_ns": 93.0}
    st = {"name": "s", "kind": "storage", "path": str(storage), "seq_read_gbs": 2.5}
    monkeypatch.setenv("HETMEM_CACHE_DIR", str(tmp_path))
    cache.save("probe", {"schema_version": 1, "tiers": [node0, st]})
    proc = hetmem("tiers", "--storage", str(storage), env={"HETMEM_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "read bandwidth" not in out
    rows = [ln for ln in out.splitlines() if "│" in ln]
    (row0,) = [ln for ln in rows if "node0" in ln]
    (row_s,) = [ln for ln in rows if f"storage:{storage}" in ln]
    assert "70.5 triad" in row0 and "93 chase" in row0
    assert "2.5 seq-read" in row_s and "triad" not in row_s
    legend = " ".join(out.split()).split("GB/s, ns: ")[1]
    assert "triad: STREAM triad" in legend and "seq-read: sequential O_DIRECT read" in legend
    assert "chase: idle latency of one thread's random pointer chase" in legend
    assert "hmat" not in legend  # only the labels the table uses


def test_hmat_ratings_are_labelled_as_ratings():
    data = inventory(fsroot=str(GOLDEN / "xeon-max-flat-snc4"), no_storage=True, use_probe=False)
    text = tiers_cmd.legend(data["tiers"])
    assert text == "GB/s, ns: hmat-read: the firmware's (HMAT) read rating"
    assert tiers_cmd.legend([]) == "GB/s, ns: not measured, not rated"
