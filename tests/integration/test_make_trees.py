# SPDX-License-Identifier: BSD-3-Clause
"""tests/golden/make_trees.py --record takes everything tier discovery reads.

Recording a golden tree as if it were a machine (--from) must give a tree
whose inventory is the original's: a file discovery reads that the recorder
leaves out shows up as a difference. The live machine's recording must
replay as the live machine, less what only the live machine has (hwloc).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO
from hetmem.tiers import inventory

GOLDEN = REPO / "tests" / "golden"
MACHINES = sorted(p.name for p in GOLDEN.iterdir() if (p / "sys").is_dir())
NODE = "sys/devices/system/node"


def _make_trees() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_trees", GOLDEN / "make_trees.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inventory(root: Path) -> dict[str, Any]:
    data = inventory(fsroot=str(root), no_storage=True, use_probe=False)
    data.pop("fsroot")
    return data


@pytest.mark.parametrize("machine", MACHINES)
def test_record_takes_what_discovery_reads(tmp_path: Path, machine: str):
    src = GOLDEN / machine
    copy = _make_trees().record(machine, src=src, out=tmp_path)
    assert copy == tmp_path / machine
    assert _inventory(copy) == _inventory(src)


def test_record_takes_memory_side_cache_and_gpu(tmp_path: Path):
    """What no golden tree has yet: memory-side cache levels (HMAT), an
    NVIDIA GPU's node next to an HMAT-rated one, a devdax device not
    onlined by kmem, a dax link that leads out of the tree."""
    src = tmp_path / "src"
    shutil.copytree(GOLDEN / "xeon-max-flat-snc4", src, symlinks=True)
    for i, size in ((1, 17179869184), (2, 34359738368)):
        d = src / NODE / f"node0/memory_side_cache/index{i}"
        d.mkdir(parents=True)
        for name, text in (("size", size), ("line_size", 64), ("indexing", 0)):
            (d / name).write_text(f"{text}\n")
    gpu = src / "proc/driver/nvidia/gpus/0000:17:00.0"
    gpu.mkdir(parents=True)
    (gpu / "numa_status").write_text("Node: 9\nStatus: online\n")
    dev = src / "sys/devices/platform/hmem.0/dax1.0"
    dev.mkdir(parents=True)
    (dev / "target_node").write_text("8\n")
    (src / "sys/bus/dax/devices").mkdir(parents=True)
    (src / "sys/bus/dax/devices/dax1.0").symlink_to("../../../devices/platform/hmem.0/dax1.0")
    (src / "sys/bus/dax/devices/dax2.0").symlink_to("/nowhere/dax2.0")
    before = _inventory(src)
    node0 = next(t for t in before["tiers"] if t["name"] == "node0")
    assert len(node0["memory_side_cache"]) == 2  # the planted facts are read at all
    assert any(t.get("provenance") for t in before["tiers"])
    node9 = next(t for t in before["tiers"] if t["name"] == "node9")
    assert "nvidia" in node9["source"]

    copy = _make_trees().record("planted", src=src, out=tmp_path / "out")
    assert _inventory(copy) == before
    assert (copy / "sys/bus/dax/devices/dax2.0").is_symlink()  # kept, dangling


def test_record_without_numa_sysfs(tmp_path: Path):
    src = tmp_path / "src"
    (src / "proc").mkdir(parents=True)
    (src / "proc/meminfo").write_text("MemTotal:  8000000 kB\nMemFree:  6000000 kB\n")
    (src / "sys/devices/system/cpu").mkdir(parents=True)
    (src / "sys/devices/system/cpu/online").write_text("0-3\n")
    before = _inventory(src)
    assert before["tiers"][0]["cpus"] == [0, 1, 2, 3]
    copy = _make_trees().record("flat", src=src, out=tmp_path / "out")
    assert _inventory(copy) == before


def _facts(data: dict[str, Any], hwloc_typed: set[str]) -> dict[str, dict[str, Any]]:
    """What the live machine and its recording share, by tier name: not the
    free memory (it moves), not hwloc's cross-check (live only), and not
    the kind and rank of a node that hwloc gave a subtype (only the live
    machine has hwloc's word for it)."""
    out = {}
    for t in data["tiers"]:
        drop = {"free_bytes", "warnings", "hwloc"}
        if t["name"] in hwloc_typed:
            drop |= {"kind", "rank", "ranked_by"}
        facts = {k: v for k, v in t.items() if k not in drop}
        facts["source"] = [s for s in t["source"] if s != "hwloc"]
        out[t["name"]] = facts
    return out


def test_record_the_live_machine(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, str(GOLDEN / "make_trees.py"), "--record", "live", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "live")
    live = inventory(no_storage=True, use_probe=False)
    live.pop("fsroot")
    typed = {t["name"] for t in live["tiers"] if (t.get("hwloc") or {}).get("subtype")}
    assert _facts(_inventory(tmp_path / "live"), typed) == _facts(live, typed)
