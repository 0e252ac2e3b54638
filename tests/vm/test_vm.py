# SPDX-License-Identifier: BSD-3-Clause
"""hetmem's NUMA paths on a real kernel with CPU-less memory nodes (issue 23).

Each machine shape of tests/vm/guestvm.py boots once (Debian's kernel in
QEMU); tests/vm/guest_checks.sh runs hetmem there and records what the
kernel says: numactl -H, memory_tiers, the pages of each array per node
(move_pages(2) queries from inside the workload) and /proc/self/numa_maps.
The tests below judge those records, never hetmem's own counters alone.

In the guests both nodes are the same host DRAM: these tests are about
where pages go, not about speed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import guestvm  # tests/vm, on sys.path as the test's own directory
import pytest

from conftest import CBUILD, REPO
from hetmem import _native

WHY_NOT = guestvm.missing() or (
    "" if (CBUILD / "bench" / "hm-placement").exists() else f"no {CBUILD}/bench/hm-placement"
)
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=f"no guest can boot here: {WHY_NOT}")

CHECKS = {
    "cxl": "tiers placement numactl channel hbw",
    "knl-flat": "tiers placement hbw autofast",
    "knl-snc": "numa hbw",
    "optane-kmem": "kmem tiers advise tiering memkind",
    "two-socket": "tiers pager probe flow",
    "cxl-type3": "cxl3 tiers",
}
# more than one high-bandwidth node holds (KNL-like: 512 MiB; SNC-like: two
# of 256 MiB, together more)
HBW_BIG_MIB = {"knl-flat": 768, "knl-snc": 384}
# where hbw_malloc must land, by shape: the high-bandwidth nodes
HBW_NODES = {"knl-flat": {"1"}, "knl-snc": {"1", "2"}, "cxl": {"0"}}
GUEST_SECONDS = {"cxl": 115, "two-socket": 100, "optane-kmem": 109, "knl-flat": 90,
                 "knl-snc": 21, "cxl-type3": 11}  # fmt: skip
# a hang guard: a TCG guest runs its checks in 1-2 minutes here alone, and
# beside the other tests (at nice 19: guestvm) gets only the CPU they leave
BOOT_TIMEOUT = 900


def _build_hbw_nodes(out: Path) -> None:
    libdir = _native.library_dir()
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run(
        [cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'include'}",
         f"-I{REPO / 'bench'}", str(REPO / "tests/vm/hbw_nodes.c"),
         f"-L{libdir}", "-lhetmem", f"-Wl,-rpath,{libdir}", "-o", str(out / "hbw_nodes")],
        check=True,
    )  # fmt: skip


# the placement workload (tests/integration/test_placement_run.py)
WORKLOAD = [str(CBUILD / "bench" / "hm-placement"), "--variant", "sweep",
            "--footprint", str(32 << 20), "--iters", "3", "--hot-passes", "48"]  # fmt: skip


def _profile_on_host(out: Path) -> Path:
    """The workload's profile, made here: its sites are the binary's, the
    same in the guest (same path, same build), and the guest took 15 s under
    TCG to do what this does in under a second. Advice is the guest's.
    The portable sampler sees a page once per period however often it is
    touched, so the period must be shorter than one of the workload's
    iterations (~15 ms here): at the default 10 ms the whole run (55 ms) was
    5 periods, the hot arrays' 48 passes counted no more per byte than one
    sweep of the cold ones (0.062 against 0.047-0.062), and the advisor put
    a cold array in DRAM. At 1 ms: 0.41 against 0.05-0.06."""
    subprocess.run(
        [sys.executable, "-m", "hetmem", "profile", "-o", str(out / "w.prof"),
         "--sampler", "portable", "--period", "1ms", "--", *WORKLOAD],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    made = sorted(out.glob("w.prof.norank.*"))
    assert len(made) == 1, made
    return made[0]


def _guest_env() -> dict[str, str]:
    env = {"HM_VM_PY": sys.executable, "HM_VM_CBUILD": str(CBUILD), "HM_VM_REPO": str(REPO)}
    for k in ("PYTHONPATH", "HETMEM_LIBDIR", "HETMEM_CBUILD"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    return env


def _shapes(check: str) -> list[str]:
    return [n for n, c in CHECKS.items() if check in c.split()]


def _missing_tools(name: str) -> list[str]:
    steps = set(CHECKS[name].split())
    tools = (["ndctl", "daxctl"] if {"kmem", "cxl3"} & steps else []) + (
        ["cxl"] if "cxl3" in steps else []
    )
    return [t for t in tools if not shutil.which(t)]


def _boot(name: str, out: Path, host: Path) -> guestvm.Result:
    """One guest, start to end: the programs and profile made here copied
    into its directory, then the guest's checks."""
    shutil.copy2(host / "hbw_nodes", out / "hbw_nodes")
    env = {**_guest_env(), "HM_VM_CHECKS": CHECKS[name], "HM_VM_WL": shlex.join(WORKLOAD)}
    if {"advise", "placement"} & set(CHECKS[name].split()):
        prof = out / "w.prof.host"
        shutil.copy2(host / "w.prof", prof)
        env["HM_VM_PROF"] = str(prof)
    env["HM_VM_HBW_OTHER"] = "0" if name.startswith("knl") else "1"  # not the fastest node
    if name in HBW_BIG_MIB:
        env["HM_VM_HBW_BIG_MIB"] = str(HBW_BIG_MIB[name])
    script = f"sh {REPO / 'tests/vm/guest_checks.sh'}\n"
    return guestvm.run(guestvm.SHAPES[name], script, out, env=env, cwd=str(REPO),
                       timeout=BOOT_TIMEOUT, stop=_STOP)  # fmt: skip


class _Gate:
    """How many guests run at once. One while the rest of the suite runs
    beside it (guests start when collection ends, so their minutes under
    TCG overlap the other tests instead of following them), two once the
    guests' own tests are reached: most of a guest's time is one emulated
    CPU busy (Python starting, 9p reads), so a second guest uses the other
    core."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._running = 0
        self._width = 1

    def widen(self) -> None:
        with self._cv:
            self._width = 2
            self._cv.notify_all()

    def run(self, fn: Callable[[], guestvm.Result]) -> guestvm.Result:
        with self._cv:
            self._cv.wait_for(lambda: self._running < self._width)
            self._running += 1
        try:
            return fn()
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()


_BOOTS: dict[str, tuple[Path, Future[guestvm.Result]]] = {}
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hm-vm")
_GATE = _Gate()
_STOP = threading.Event()  # the session ended: running guests are killed


def _start_all(session: pytest.Session) -> None:
    """Every guest the selected tests need, started once, longest first."""
    if _BOOTS:
        return
    names = {getattr(i, "callspec", None) and i.callspec.params.get("guest") for i in session.items}
    names = {n for n in names if n in CHECKS and not _missing_tools(n)}
    if not names or WHY_NOT:
        return
    base = Path(tempfile.mkdtemp(prefix="hetmem-vm-"))
    # What every guest shares is made here once, in this thread, before any
    # guest runs: one build is enough, and a fresh CI run once failed to exec
    # cc (EFAULT, cause not found) from a pool thread beside running guests.
    host = base / "host"
    try:
        host.mkdir()
        _build_hbw_nodes(host)
        shutil.copy2(_profile_on_host(host), host / "w.prof")
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    session.config.pluginmanager.register(_SessionEnd(base), "hetmem-vm-end")
    # longest first (seconds of steps, one guest alone here), so that the
    # short ones fill the end
    for name in sorted(names, key=lambda n: -GUEST_SECONDS.get(n, 0)):
        out = base / name
        out.mkdir()
        _BOOTS[name] = (out, _POOL.submit(_GATE.run, lambda n=name, o=out: _boot(n, o, host)))


def start_guests_early(session: pytest.Session) -> None:
    """Called by tests/conftest.py when collection ends. What fails here
    fails the guests' own tests, which try again, never the session."""
    try:
        _start_all(session)
    except Exception:
        return


class _SessionEnd:
    """Guests not yet started when the session ends (-x, Ctrl-C) never
    are, a running one is killed, and their directories go."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def pytest_sessionfinish(self) -> None:
        _STOP.set()
        _POOL.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def guest(request: pytest.FixtureRequest) -> Iterator:
    name = request.param
    lack = _missing_tools(name)
    if lack:
        pytest.skip(f"{name}: {', '.join(lack)} not installed (apt install ndctl daxctl)")
    _start_all(request.session)
    _GATE.widen()
    out, boot = _BOOTS[name]
    r = boot.result()
    if r.rc != 0:
        # every test of the guest repeats this: short, and no traceback (a
        # CI log is cut, and 18 copies of one guest's console once hid
        # another test's failure)
        log, con = r.log.splitlines()[-15:], r.console.splitlines()[-15:]
        pytest.fail("\n".join([f"guest {name}: rc {r.rc}", *log, "console:", *con]), pytrace=False)
    yield name, out
    keep = os.environ.get("HETMEM_VM_KEEP")  # a directory to keep each guest's records in
    if keep:
        dest = Path(keep) / name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(out, dest, ignore=shutil.ignore_patterns("disk.img", "*.cpio"))
    shutil.rmtree(out, ignore_errors=True)


def _step(out: Path, name: str) -> str:
    rc = (out / f"{name}.rc").read_text().strip()
    err = (out / f"{name}.err").read_text(errors="replace")
    assert rc == "0", f"{name}: exit {rc}\n{err[-3000:]}"
    return (out / f"{name}.out").read_text()


def _last_json(text: str) -> dict[str, Any]:
    return json.loads(text.strip().splitlines()[-1])


def _tiers(out: Path) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in json.loads(_step(out, "tiers"))["tiers"]}


@pytest.mark.parametrize("guest", list(CHECKS), indirect=True)
def test_the_kernel_sees_the_shape(guest) -> None:
    name, out = guest
    numactl = _step(out, "numactl")
    shape = guestvm.SHAPES[name]
    nodes = list(shape.nodes) + ([(shape.nvdimm[0], "")] if shape.nvdimm else [])
    nodes += [(shape.cxl_type3, "")] if shape.cxl_type3 else []
    assert f"available: {len(nodes)} nodes" in numactl, numactl
    for i, (_, cpus) in enumerate(nodes):
        line = next(x for x in numactl.splitlines() if x.startswith(f"node {i} cpus:"))
        assert bool(line.split(":")[1].strip()) == bool(cpus), numactl


@pytest.mark.parametrize("guest", _shapes("tiers"), indirect=True)
def test_tiers_rank_and_classify_from_live_sysfs(guest) -> None:
    name, out = guest
    tiers = _tiers(out)
    n0, n1 = tiers["node0"], tiers["node1"]
    assert n0["kind"] == "dram" and n0["cpus"]
    if name == "two-socket":
        assert n1["kind"] == "dram" and n1["cpus"] and n0["cpus"] != n1["cpus"]
        assert n0["distances"]["1"] > n0["distances"]["0"]
        return
    if name == "cxl-type3":  # no HMAT: the kernel's CXL path names the node
        _cxl_type3_node(out, n0, n1)
        return
    # HMAT from the guest's firmware, as the shape rated it
    assert n1["cpus"] == [] and "hmat" in n1["source"]
    shape = {t: (lat, bw) for ini, t, lat, bw in guestvm.SHAPES[name].hmat}
    assert n1["hmat"]["read_latency_ns"] == shape[1][0]
    assert n1["hmat"]["read_bandwidth_mibs"] == shape[1][1]
    assert tiers["node0"]["ranked_by"] == "hmat"
    if name == "knl-flat":  # MCDRAM: more than twice DRAM's bandwidth
        assert n1["kind"] == "hbm" and n1["rank"] < n0["rank"]
    else:  # a slower CPU-less node: ranked below DRAM
        assert n1["rank"] > n0["rank"]
    assert n0["memory_tier"] is not None  # the kernel's memory_tiers were read
    if name == "optane-kmem":  # the DAX provenance path, for real
        prov = n1["provenance"]
        assert n1["kind"] == "pmem" and prov["origin"] == "nvdimm" and prov["kmem"], n1
        assert "dax" in n1["source"]
        assert n1["memory_tier"] > n0["memory_tier"]  # kmem put it in a lower tier
    elif _guest_kernel(out) < (6, 9):  # no HMAT-based memory tiers before Linux 6.9
        assert n1["memory_tier"] == n0["memory_tier"]


def _cxl_type3_node(out: Path, n0: dict[str, Any], n1: dict[str, Any]) -> None:
    """QEMU's CXL type-3 device made a region, a devdax namespace and system
    RAM (kmem): a CPU-less node of kind cxl, in a lower memory tier."""
    for s in ("cxl_region", "cxl_ndctl", "cxl_daxctl"):
        _step(out, s)
    link = (out / "cxl_dax_link.txt").read_text()
    assert "ACPI0017" in link and "/ndbus" in link, link  # CXL pmem: both on the path
    prov = n1["provenance"]
    assert n1["cpus"] == [] and n1["kind"] == "cxl", n1
    assert prov["origin"] == "cxl" and prov["kmem"] and "dax" in n1["source"], n1
    assert n1["capacity_bytes"] > 0 and n1["rank"] > n0["rank"]
    assert n1["memory_tier"] > n0["memory_tier"]  # kmem's default: a lower tier


def _guest_kernel(out: Path) -> tuple[int, int]:
    major, minor = (out / "uname.txt").read_text().split(".")[:2]
    return int(major), int(minor)


def _placed(out: Path) -> dict[str, int]:
    """function -> tier index, from the advised placement file."""
    from hetmem.placement import fileformat

    pl = fileformat.load(out / "w.toml")
    return {s.symbols[0].split(" ")[0]: s.tier for s in pl.sites if s.symbols}


def _tier_nodes(out: Path) -> dict[int, int]:
    from hetmem.placement import fileformat

    pl = fileformat.load(out / "w.toml")
    return dict(enumerate(t.numa_node for t in pl.tiers))


@pytest.mark.parametrize("mode", ["flat", "hybrid"])
@pytest.mark.parametrize("guest", _shapes("placement"), indirect=True)
def test_each_site_lands_on_its_advised_node(guest, mode: str) -> None:
    name, out = guest
    placed, nodes = _placed(out), _tier_nodes(out)
    # the advisor used the guest's live tiers: DRAM and the CPU-less node
    fast, slow = (1, 0) if name == "knl-flat" else (0, 1)
    assert nodes[0] == fast and nodes[1] == slow, nodes
    for f in ("alloc_hot_a", "alloc_hot_b"):
        assert placed[f] == 0, placed
    for f in ("alloc_cold_x", "alloc_cold_y", "alloc_cold_z"):
        assert placed[f] == 1, placed
    run = _last_json(_step(out, mode))
    # the kernel's view: every touched page of each array on its node
    pages = run["numa_pages"]
    for arr in ("hot_a", "hot_b"):
        assert set(pages[arr]) == {str(fast)}, pages
    for arr in ("cold_x", "cold_y", "cold_z"):
        assert set(pages[arr]) == {str(slow)}, pages
        assert sum(pages[arr].values()) > 0
    maps = (out / f"{mode}.numa_maps").read_text()
    assert f"bind:{slow}" in maps
    # the data read back exactly: the checksum of the run without hetmem
    assert run["checksum"] == _last_json(_step(out, "dram"))["checksum"]


@pytest.mark.parametrize("policy", ["none", "bind", "preferred", "interleave", "bind_all"])
@pytest.mark.parametrize("guest", _shapes("hbw"), indirect=True)
def test_hbw_malloc_lands_on_the_high_bandwidth_node(guest, policy: str) -> None:
    """Each hbw_set_policy as memkind documents it: BIND and PREFERRED (and
    no policy) on one high-bandwidth node, BIND_ALL on those nodes,
    INTERLEAVE across all of them."""
    name, out = guest
    r = _last_json(_step(out, f"hbw_{policy}"))
    assert r["set"] == 0 and r["available"] == 0 and r["ptr"] == 1, r
    # KNL-like: MCDRAM (node 1, or 1 and 2) is the fastest tier; CXL-like:
    # local DRAM is. Every page move_pages(2) reports is there; once (two
    # guests at a time) it reported 1535 of the 8192 touched pages of a
    # glibc block, the others with an error status: the count is not the claim
    hbw = HBW_NODES[name]
    got = set(r["nodes"])
    assert got and got <= hbw and sum(r["nodes"].values()) > 0, r
    if policy == "interleave":  # 32 MiB spread: every node gets pages
        assert got == hbw, r
    elif policy != "bind_all":  # one node: the nearest of them
        assert len(got) == 1, r


@pytest.mark.parametrize("guest", ["knl-flat", "knl-snc"], indirect=True)
def test_hbw_bind_refuses_what_the_node_cannot_hold(guest) -> None:
    """More than one MCDRAM node holds: BIND gets NULL and ENOMEM (memkind's
    words, not an OOM kill at first touch), PREFERRED spills to other
    memory, BIND_ALL fits where the high-bandwidth nodes together hold it."""
    name, out = guest
    hbw = HBW_NODES[name]
    bind = _last_json(_step(out, "hbw_bind_big"))
    assert bind["ptr"] == 0 and bind["errno"] == 12, bind  # ENOMEM
    pref = _last_json(_step(out, "hbw_preferred_big"))
    assert pref["ptr"] == 1 and set(pref["nodes"]) & hbw and len(pref["nodes"]) > 1, pref
    every = _last_json(_step(out, "hbw_bind_all_big"))
    if len(hbw) == 1:  # one node: BIND_ALL is BIND
        assert every["ptr"] == 0 and every["errno"] == 12, every
    else:  # 384 MiB over two 256 MiB nodes: on both, nowhere else
        assert every["ptr"] == 1 and set(every["nodes"]) == hbw, every


@pytest.mark.parametrize("guest", _shapes("hbw") + _shapes("memkind"), indirect=True)
def test_memkind_kinds_land_where_memkind_says(guest) -> None:
    """memkind.h: MEMKIND_HBW on one high-bandwidth node, HBW_ALL on those
    nodes, REGULAR on the nodes with CPUs, DAX_KMEM on the memory kmem
    onlined (Optane-KMEM guest) and refused where there is none."""
    name, out = guest
    hbw = HBW_NODES.get(name, {"0"})  # optane-kmem: DRAM is the fastest
    r = {k: _last_json(_step(out, f"mk_{k}")) for k in ("hbw", "hbw_all", "regular", "dax_kmem")}
    for k in ("hbw", "hbw_all", "regular"):
        assert r[k]["available"] == 0 and r[k]["ptr"] == 1 and r[k]["nodes"], (k, r[k])
    assert len(r["hbw"]["nodes"]) == 1 and set(r["hbw"]["nodes"]) <= hbw, r["hbw"]
    assert set(r["hbw_all"]["nodes"]) <= hbw, r["hbw_all"]
    assert set(r["regular"]["nodes"]) == {"0"}, r["regular"]  # node 0 has the CPUs
    dax = r["dax_kmem"]
    if name == "optane-kmem":
        assert dax["available"] == 0 and set(dax["nodes"]) == {"1"}, dax
    elif name.startswith("knl"):  # no pmem or cxl node: memkind's NULL
        assert dax["available"] == -1 and dax["ptr"] == 0 and dax["errno"] == 12, dax
    else:  # cxl: a dax kind only if hetmem calls the slow node pmem or cxl
        slow = _tiers(out)["node1"]["kind"] in ("pmem", "cxl")
        assert dax["ptr"] == int(slow) and (not slow or set(dax["nodes"]) == {"1"}), dax


@pytest.mark.parametrize("var", ["override", "memkind"])
@pytest.mark.parametrize("guest", _shapes("hbw"), indirect=True)
def test_hbw_nodes_override_moves_hbw_malloc(guest, var: str) -> None:
    """HETMEM_HBW_NODES / MEMKIND_HBW_NODES naming the node the firmware
    rates slower: hbw_malloc (HBW_POLICY_BIND) lands there instead."""
    name, out = guest
    r = _last_json(_step(out, f"hbw_{var}"))
    other = "0" if name.startswith("knl") else "1"
    assert r["ptr"] == 1 and set(r["nodes"]) == {other}, r


@pytest.mark.parametrize(
    ("step", "policy"),
    [
        ("pol_membind", "bind:1"),
        ("pol_interleave", "interleave:0-1"),
        ("pol_preferred", "prefer:1"),
        ("pol_preferred_many", "prefer (many):1"),
    ],
)
@pytest.mark.parametrize("guest", _shapes("numactl"), indirect=True)
def test_run_sets_the_numactl_policy(guest, step: str, policy: str) -> None:
    _, out = guest
    run = _last_json(_step(out, step))
    arrays = ("hot_a", "hot_b", "cold_x", "cold_y", "cold_z")
    assert {run["numa_policies"][a] for a in arrays} == {policy}, run
    nodes = {n for a in arrays for n in run["numa_pages"][a]}
    # node 1 has room for all 16 MiB: bind and both prefers put every page there
    assert nodes == ({"0", "1"} if step == "pol_interleave" else {"1"}), run
    if step == "pol_interleave":
        # round-robin over the nodes: per page, or per 2 MiB where
        # transparent huge pages back part of an array (512 pages at once)
        for a in arrays:
            c = run["numa_pages"][a]
            assert abs(c.get("0", 0) - c.get("1", 0)) <= 513, (a, c)


@pytest.mark.parametrize("guest", _shapes("numactl"), indirect=True)
def test_weighted_interleave_on_an_older_kernel_is_one_line(guest) -> None:
    _, out = guest
    rc = (out / "pol_weighted.rc").read_text().strip()
    err = (out / "pol_weighted.err").read_text()
    assert rc == "2", err  # Debian 12's kernel (6.1) has no MPOL_WEIGHTED_INTERLEAVE
    assert "Linux 6.9 or later" in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "pol_weighted.out").read_text()  # the command never ran


@pytest.mark.parametrize("guest", _shapes("tiering"), indirect=True)
def test_kernel_tiering_beside_flat_and_hybrid(guest) -> None:
    """The baseline a CXL/Optane user would otherwise pick: demotion and
    NUMA balancing in tiering mode move pages (the kernel's counters say
    how many); flat puts each array where the placement says and moves
    nothing. Both guest nodes are host DRAM: no speed claim."""
    _, out = guest
    res = json.loads(_step(out, "tiering"))
    assert res["schema_version"] == 1 and res["virtual_machine"] is True
    runs = {r["config"]: r for r in res["runs"]}
    assert set(runs) == {"kernel", "flat"}
    k = runs["kernel"]["vmstat"]
    # 800 MiB on a node with ~0.6 GB free: the kernel demoted to node 1
    assert k["pgdemote_kswapd"] + k["pgdemote_direct"] > 0, k
    outs = {c: json.loads(r["stdout_tail"][0]) for c, r in runs.items()}
    for c in ("flat",):
        v = runs[c]["vmstat"]
        assert v["pgdemote_kswapd"] + v["pgdemote_direct"] == 0, (c, v)
        pages = outs[c]["numa_pages"]
        assert all(set(pages[a]) == {"0"} for a in ("hot_a", "hot_b")), pages
        assert all(set(pages[a]) == {"1"} for a in ("cold_x", "cold_y", "cold_z")), pages
    # the same data in every configuration
    assert len({o["checksum"] for o in outs.values()}) == 1, outs
    # root's settings as they were before the bench (Debian's defaults)
    assert (out / "tiering_after.txt").read_text().split() == ["false", "0"]
    # SIGTERM while they were on: restored, and 128 + 15 as a shell reports
    assert (out / "tiering_during.txt").read_text().split() == ["true", "2"]
    err = (out / "tiering_term.err").read_text()
    assert (out / "tiering_term.rc").read_text().strip() == "143", err
    assert "stopped by SIGTERM" in err and len(err.strip().splitlines()) == 1, err
    assert (out / "tiering_term_after.txt").read_text().split() == ["false", "0"]


@pytest.mark.parametrize("guest", _shapes("channel"), indirect=True)
def test_channel_on_a_numa_node(guest) -> None:
    _, out = guest
    r = _last_json(_step(out, "chan"))
    assert r["ok"] and r["policy"] == "bind:1", r
    assert set(r["pages"]) == {"1"} and r["pages"]["1"] >= 4096, r  # 16 MiB written


@pytest.mark.parametrize("guest", _shapes("flow"), indirect=True)
def test_flow_channel_local_to_writer_or_reader(guest) -> None:
    """The seed's LocW and LocR on two sockets: the writer on node 0 and the
    reader on node 1 (each bound to its node's CPU, as the kernel reports
    it), the channel's pages on the writer's node or on the reader's (from
    each component's numa_maps), every object read from its own step."""
    _, out = guest
    for step, mode, local in (("flow_locw", "parallel", 0), ("flow_locr", "serial", 1)):
        r = json.loads(_step(out, step))
        assert r["mode"] == mode and r["channel_tier"] == f"node:{local}", r
        assert r["nodes"] == {"writer": 0, "reader": 1}, r
        assert r["cpus"] == {"writer": [0], "reader": [1]}, r
        assert r["objects_read"] == 4 * 8 and r["stamp_errors"] == 0, r
        for role in ("writer", "reader"):  # 8 MiB a step: 2048 pages
            pages = r["channel_pages"][role]
            assert set(pages) == {str(local)} and pages[str(local)] >= 2048, (role, r)


@pytest.mark.parametrize("guest", _shapes("pager"), indirect=True)
def test_pager_on_an_older_kernel(guest) -> None:
    """Debian 12's kernel (6.1) has no userfaultfd WP_ASYNC, PAGEMAP_SCAN
    nor UFFDIO_CONTINUE_MODE_WP: the pager's own tests and a cache-mode run
    there, data read back exactly, dirty pages tracked by write-protect
    faults (memfd mode: every evicted unit written back; it hung before)."""
    _, out = guest
    basic = _step(out, "sdm_basic")
    assert '"fill": "memfd_minor_continue", "dirty_tracking": "all"' in basic
    _step(out, "sdm_stress")
    _step(out, "sdm_dirtyfill")
    run = _last_json(_step(out, "cache"))
    stats = json.loads((out / "cache.stats.json").read_text())
    mode = stats["pager"]["features"]["dirty_tracking"]
    assert mode in ("wp_sync", "all"), stats["pager"]["features"]
    assert stats["pager"]["counters"]["evictions"] > 0  # 64 MiB through a 16 MiB cache
    assert run["checksum"] == _last_json(_step(out, "cache_dram"))["checksum"]


@pytest.mark.parametrize("guest", _shapes("probe"), indirect=True)
def test_probe_measures_each_node(guest) -> None:
    _, out = guest
    res = json.loads(_step(out, "probe"))
    nodes = {t["numa_node"]: t for t in res["tiers"] if t.get("numa_node") is not None}
    assert set(nodes) == {0, 1}, res["tiers"]
    for t in nodes.values():
        assert t["best"]["triad_gbs"] > 0 and t["latency_ns"] > 0, t


@pytest.mark.parametrize("guest", _shapes("autofast"), indirect=True)
def test_auto_fast_sends_sizes_in_range_to_the_fast_node(guest) -> None:
    """memkind's autohbw without a profile: the three 8.5 MiB cold arrays
    are in 4M:16M and land on the MCDRAM-like node 1; the 3.2 MiB hot ones
    are below MIN and stay on node 0."""
    _, out = guest
    run = _last_json(_step(out, "autofast"))
    pages = run["numa_pages"]
    for a in ("cold_x", "cold_y", "cold_z"):
        assert set(pages[a]) == {"1"}, pages
    for a in ("hot_a", "hot_b"):
        assert set(pages[a]) == {"0"}, pages
    stats = json.loads((out / "autofast.stats.json").read_text())
    assert stats["placement"]["tiers"][0]["numa_node"] == 1
