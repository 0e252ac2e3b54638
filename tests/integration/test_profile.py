# SPDX-License-Identifier: BSD-3-Clause
"""Profiles: strict reading, merging, symbolization from DWARF, `profile show`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetmem.errors import HetmemError, SchemaError
from hetmem.placement import profile as P
from hetmem.placement import symbolize

BID = "867ab73e3a680fe6aaa5389ebeb62516237ec093"


def site(frames, peak=1 << 20, loads=100, stores=0, live=None, allocs=1, **kw):
    rec = {
        "frames": frames,
        "allocs": allocs,
        "bytes": max(peak, 1) * allocs,
        "max_bytes": peak,
        "peak_live_bytes": peak,
        "samples": {"loads": loads, "stores": stores},
        **kw,
    }
    if live is not None:
        rec["live"] = live
    return rec


def text(sites, modules=(("/bin/app", BID),), **hdr):
    return P.dumps(P.default_header(**hdr), list(modules), sites)


def parse(s: str) -> P.Profile:
    return P.parse_bytes(s.encode(), "t.prof")


# --------------------------------------------------------------------------
# Reading


def test_roundtrip_fields_and_scaling():
    p = parse(
        text(
            [
                site(
                    [[0, 0x1234], [0, 0x99]],
                    peak=4096,
                    loads=10,
                    stores=5,
                    live=[[0, 4096], [500, 0]],
                    lifetime_ns={"min": 1, "mean": 2.5, "max": 4},
                    random_fraction=0.25,
                    small={"count": 7, "bytes": 70},
                )
            ],
            sampler={"name": "portable", "period": 1000.0},
            rank=3,
        )
    )
    assert p.rank == 3 and p.depth == 8 and p.binary.build_id == BID
    (s,) = p.sites
    assert s.frames[0][1] == 0x1234 and s.frames[1][1] == 0x99
    assert s.est_accesses == 15 * 1000.0
    assert s.live == [(0, 4096), (500, 0)]
    assert s.lifetime_mean_ns == 2.5 and s.random_fraction == 0.25 and s.small_count == 7
    assert s.accesses_per_byte == pytest.approx(15000 / 4096)


def test_missing_series_means_peak_all_run():
    (s,) = parse(text([site([[0, 1]], peak=100)])).sites
    assert s.live == [(0, 100)]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.replace('"schema_version": 1', '"schema_version": 2', 1), "schema_version 2"),
        (lambda t: t.replace("hetmem-profile", "other-profile", 1), "not a hetmem profile"),
        (lambda t: t.rsplit("\n", 2)[0] + "\n", "truncated"),  # end record cut off
        (lambda t: t[:-5], "truncated"),  # half a line
        (lambda t: t.replace('"depth": 8', '"depth": 0'), "'depth'"),
        (lambda t: t.replace('"allocs": 1', '"allocs": -1'), "'allocs'"),
        (lambda t: t.replace('"allocs": 1', '"allocs": "1"'), "'allocs'"),
        (lambda t: t.replace("[[0, 4660]]", "[[5, 4660]]"), "module 5"),
        (lambda t: t.replace("[[0, 4660]]", "[]"), "'frames'"),
        (lambda t: t.replace('"sites": 1', '"sites": 2'), "counts do not match"),
        (lambda t: t.replace('"period": 1.0', '"period": NaN'), "'period'"),
        (lambda t: t.replace('"build_id": "8', '"build_id": "z'), "hex"),
        (lambda t: t + "{}\n", "after the end"),
        (lambda t: t.replace('"type": "site"', '"type": "blob"'), "unknown record type"),
        (lambda t: "", "empty"),
        (lambda t: t.replace("[[0, 4096], [10, 0]]", "[[10, 4096], [10, 0]]"), "increase"),
        (lambda t: t.replace("[[0, 4096], [10, 0]]", "[[0, 9999999], [10, 0]]"), "peak_live"),
        (
            lambda t: t.replace('"threads": 1', '"threads": 1, "stopped_by_signal": 300'),
            "'stopped_by_signal'",
        ),
    ],
)
def test_bad_profiles_are_one_line_schema_errors(mutate, message):
    good = text([site([[0, 4660]], peak=4096, live=[[0, 4096], [10, 0]])])
    parse(good)  # the unmutated file is fine
    bad = mutate(good)
    with pytest.raises(SchemaError) as exc:
        parse(bad)
    msg = str(exc.value)
    assert "\n" not in msg and message in msg, msg


def test_load_reports_unreadable_file(tmp_path):
    with pytest.raises(SchemaError, match="cannot read"):
        P.load(tmp_path / "missing.prof")


# --------------------------------------------------------------------------
# Merging


def test_merge_is_robust_to_depth_and_sums_counts():
    # Run A recorded 4 frames per site, run B 2: the common depth is 2.
    a = parse(
        text(
            [
                site([[0, 10], [0, 20], [0, 30], [0, 40]], peak=100, loads=5),
                site([[0, 11], [0, 20]], peak=50, loads=1),
            ],
            depth=4,
            rank=0,
        )
    )
    b = parse(text([site([[0, 10], [0, 20]], peak=300, loads=7)], depth=2, rank=1))
    m = P.merge([a, b])
    assert m.depth == 2
    assert len(m.sites) == 2
    hot = next(s for s in m.sites if s.frames[0][1] == 10)
    assert hot.loads == 12 and hot.peak_live_bytes == 300 and hot.sources == 2
    assert len(hot.frames) == 2


def test_merge_matches_by_build_id_not_path():
    # The same library at two paths (another install prefix): one site.
    a = parse(text([site([[0, 10]], loads=1)], modules=[("/opt/a/libx.so", BID)]))
    b = parse(text([site([[0, 10]], loads=2)], modules=[("/usr/lib/libx.so", BID)]))
    other = "aa" * 20
    c = parse(text([site([[0, 10]], loads=4)], modules=[("/opt/a/libx.so", other)]))
    m = P.merge([a, b, c])
    assert sorted(s.loads for s in m.sites) == [3, 4]


def test_merge_combines_same_process_sites_that_truncation_joins():
    a = parse(
        text(
            [
                site([[0, 10], [0, 1]], peak=100, live=[[0, 100], [50, 0]]),
                site([[0, 10], [0, 2]], peak=80, live=[[20, 80], [90, 0]]),
            ],
            depth=2,
        )
    )
    b = parse(text([site([[0, 10]], peak=10)], depth=1))
    m = P.merge([a, b])
    (s,) = m.sites
    mine = m.per_profile[0][0]
    # Live at once between 20 and 50: 180 bytes.
    assert mine.peak_live_bytes == 180
    assert mine.live == [(0, 100), (20, 180), (50, 80), (90, 0)]
    assert s.peak_live_bytes == 180


def test_add_series():
    assert P.add_series([[(0, 5), (10, 0)], [(5, 3)]]) == [(0, 5), (5, 8), (10, 3)]


# --------------------------------------------------------------------------
# Symbolization (a real binary, built here with gcc -g)

APP_C = """\
#include <stdlib.h>
#include <stdio.h>
__attribute__((noinline)) void *alloc_hot(size_t n) {
  return malloc(n);
}
__attribute__((noinline)) void *alloc_cold(size_t n) {
  char *p = malloc(n);
  return p;
}
int main(void) {
  char *a = alloc_hot(1 << 20);
  char *b = alloc_cold(1 << 22);
  printf("%p %p\\n", (void *)a, (void *)b);
  free(a);
  free(b);
  return 0;
}
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("app")
    src = d / "app.c"
    src.write_text(APP_C)
    exe = d / "app"
    subprocess.run(["gcc", "-g", "-O0", "-o", str(exe), str(src)], check=True)
    nm = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    syms = {ln.split()[2]: int(ln.split()[0], 16) for ln in nm.splitlines() if len(ln.split()) == 3}
    notes = subprocess.run(
        ["readelf", "-n", str(exe)], capture_output=True, text=True, check=True
    ).stdout
    bid = re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)
    return {"exe": str(exe), "src": str(src), "syms": syms, "build_id": bid}


def _addr2line(exe: str, off: int) -> tuple[str, int]:
    out = subprocess.run(
        ["addr2line", "-f", "-e", exe, hex(off)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    _file, line = out[1].rsplit(":", 1)
    return out[0], int(line.split()[0])


def test_build_id_matches_readelf(app):
    assert symbolize.build_id(app["exe"]) == app["build_id"]


def test_symbolize_known_offsets(app):
    hot, cold = app["syms"]["alloc_hot"], app["syms"]["alloc_cold"]
    data = symbolize.symbolize_raw(app["exe"], app["build_id"], [hot, cold, cold + 8, 0])
    assert data["verified"] is True and data["dwarf"] is True
    f_hot, f_cold, f_mid, f_none = data["frames"]
    assert f_hot["function"] == "alloc_hot" and f_hot["function_offset"] == 0
    assert f_hot["file"] == app["src"] and f_hot["line"] == 3
    assert f_cold["function"] == "alloc_cold" and f_cold["line"] == 6
    assert f_mid["function"] == "alloc_cold" and f_mid["function_offset"] == 8
    # Agrees with binutils' addr2line on an address inside the function.
    fn, line = _addr2line(app["exe"], cold + 8)
    assert (fn, line) == (f_mid["function"], f_mid["line"])
    assert f_none["function"] is None


def test_symbolizer_uses_return_address_minus_one(app):
    # A return address is the instruction after the call: looking it up
    # as-is can land on the next line; offset - 1 is the call itself.
    sym = symbolize.Symbolizer()
    hot, cold = app["syms"]["alloc_hot"], app["syms"]["alloc_cold"]
    rets = list(range(hot + 1, cold))
    sym.prefetch(("k", app["exe"], app["build_id"], r) for r in rets)
    exact = symbolize.symbolize_raw(app["exe"], "", [r - 1 for r in rets])["frames"]
    for r, ex in zip(rets, exact, strict=True):
        loc = sym.lookup("k", app["exe"], app["build_id"], r)
        assert loc is not None and loc.function == "alloc_hot"
        assert (loc.file, loc.line) == (ex["file"], ex["line"])


def test_symbolize_rejects_another_build(app, tmp_path):
    with pytest.raises(HetmemError, match="build-id") as exc:
        symbolize.symbolize_raw(app["exe"], "ab" * 20, [app["syms"]["main"]])
    assert "\n" not in str(exc.value)
    with pytest.raises(HetmemError, match="not found"):
        symbolize.symbolize_raw(str(tmp_path / "gone"), "ab" * 20, [1])
    with pytest.raises(HetmemError, match="not an ELF"):
        (tmp_path / "x.txt").write_text("hello")
        symbolize.build_id(str(tmp_path / "x.txt"))


def test_profile_show_symbolizes(app, tmp_path, hetmem):
    hot, cold = app["syms"]["alloc_hot"], app["syms"]["alloc_cold"]
    path = tmp_path / "a.prof"
    path.write_text(
        text(
            [
                site([[0, hot + 10]], peak=1 << 20, loads=1000),
                site([[0, cold + 12]], peak=4 << 20, loads=3),
            ],
            modules=[(app["exe"], app["build_id"])],
        )
    )
    proc = hetmem("profile", "show", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    first, second = data["sites"]
    assert first["function"] == "alloc_hot" and first["file"] == app["src"]
    assert second["function"] == "alloc_cold"
    assert first["accesses_per_byte"] == pytest.approx(1000 / (1 << 20))
    proc = hetmem("profile", "show", str(path))
    assert proc.returncode == 0 and "alloc_hot" in proc.stdout
    # show's own options, after the verb's REMAINDER
    proc = hetmem("profile", "show", str(path), "--top", "1", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["sites"]) == 1
    proc = hetmem("profile", "show", "--help")
    assert proc.returncode == 0 and "--top N" in proc.stdout and "FILE" in proc.stdout
    for bad in (["--top", "x", str(path)], [str(path), "--top", "-1"], [str(path), str(path)], []):
        proc = hetmem("profile", "show", *bad)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (bad, proc.stderr)


def test_profile_cli_errors(tmp_path, hetmem):
    stopped = tmp_path / "stopped.prof"
    stopped.write_text(text([site([[0, 1]])], stopped_by_signal=-2))
    proc = hetmem("profile", "show", str(stopped))
    assert (
        proc.returncode == 2
        and proc.stderr.count("\n") == 1
        and "stopped_by_signal" in (proc.stderr)
    )
    bad = tmp_path / "bad.prof"
    bad.write_text(text([site([[0, 1]])])[:-10])
    proc = hetmem("profile", "show", str(bad))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "truncated" in proc.stderr
    proc = hetmem("profile", "--depth", "0", "--", "true")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--depth" in proc.stderr
    proc = hetmem("profile", "--", str(tmp_path / "no-such-program"))
    assert proc.returncode == 127 and "no such file" in proc.stderr  # as a shell gives
    proc = hetmem("profile")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    # -o FILE writes FILE.RANK.PID per process: naming FILE takes them (a
    # file being written, .tmpPID, is not one of them)
    (tmp_path / "run.prof.norank.41").write_text(text([site([[0, 1]])]))
    (tmp_path / "run.prof.norank.42.tmp42").write_text("")
    proc = hetmem("profile", "show", str(tmp_path / "run.prof"))
    assert proc.returncode == 0 and "run.prof.norank.41" in proc.stdout, proc.stderr
    proc = hetmem("advise", str(tmp_path / "run.prof"), "--fast-budget", "1G")
    assert proc.returncode == 0 and "run.prof.norank.41" in proc.stdout + proc.stderr
    # an MPI run: two ranks with sites at the same time; show needs one of them
    for rank, pid in ((0, 51), (1, 52)):
        (tmp_path / f"mpi.prof.{rank}.{pid}").write_text(text([site([[0, 1]])], rank=rank))
    proc = hetmem("profile", "show", str(tmp_path / "mpi.prof"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "stands for 2 per-process profiles" in proc.stderr and "mpi.prof.1.52" in proc.stderr
    proc = hetmem("profile", "show", str(tmp_path / "mpi.prof.1.52"))
    assert proc.returncode == 0, proc.stderr
    # a damaged one is still named in a one-line error
    (tmp_path / "run.prof.norank.41").write_text(text([site([[0, 1]])])[:-10])
    proc = hetmem("advise", str(tmp_path / "run.prof"), "--fast-budget", "1G")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "run.prof.norank.41" in proc.stderr


def test_symbolize_by_build_id_from_debug_tree():
    # A module gone from its recorded path is found by build-id under
    # /usr/lib/debug/.build-id (separate debug files of installed packages).
    root = Path("/usr/lib/debug/.build-id")
    debug = sorted(root.glob("*/*.debug"))[:20] if root.is_dir() else []
    for f in debug:
        bid = f.parent.name + f.name[: -len(".debug")]
        if symbolize.build_id(str(f)) != bid:
            continue
        nm = subprocess.run(["nm", "--defined-only", str(f)], capture_output=True, text=True)
        funcs = [ln.split() for ln in nm.stdout.splitlines() if " T " in ln or " t " in ln]
        if not funcs:
            continue
        addr, _, name = funcs[0][:3]
        data = symbolize.symbolize_raw("/nonexistent/module.so", bid, [int(addr, 16)])
        assert data["path"] == str(f) and data["verified"] is True
        aliases = {n for a, _, n in (x[:3] for x in funcs if len(x) >= 3) if a == addr}
        assert data["frames"][0]["function"] in aliases | {name}
        return
    pytest.skip("no usable separate debug file under /usr/lib/debug/.build-id")


# --------------------------------------------------------------------------
# C++: sites named by the program's code, not by operator new or the inlined
# standard library


CXX_SRC = """#include <cstdio>
#include <vector>
__attribute__((noinline)) std::vector<double> make_hot() {
  return std::vector<double>(2 << 20, 1.0);  // line 4
}
int main() {
  auto h = make_hot();
  std::vector<double> grow;
  for (int i = 0; i < (1 << 20); i++) grow.push_back(i);  // line 9
  std::printf("%zu %zu\\n", h.size(), grow.size());
  return 0;
}
"""


def test_cxx_sites_are_named_by_the_program(tmp_path: Path) -> None:
    from conftest import profile_and_show

    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler")
    src = tmp_path / "v.cpp"
    src.write_text(CXX_SRC)
    exe = tmp_path / "v"
    subprocess.run([cxx, "-g", "-O2", str(src), "-o", str(exe)], check=True)
    proc, _, show = profile_and_show(tmp_path, "v", str(exe))
    assert proc.returncode == 0, proc.stderr
    where = {(s["function"].split("(")[0], Path(s["file"]).name, s["line"]) for s in show["sites"]}
    # operator new (libstdc++) is skipped; the names are demangled; the line
    # is the program's call, not the inlined new_allocator.h / alloc_traits.h
    assert ("make_hot", "v.cpp", 4) in where
    assert all(s["user_frame"] == 1 for s in show["sites"])
    # std::vector's own growth (_M_realloc_insert, a function of the program
    # compiled from the library's header) is the runtime's too: the site is
    # main's push_back line
    grow = [s for s in show["sites"] if any("_M_realloc_insert" in f for f in s["symbols"])]
    assert grow and all((s["function"], s["line"]) == ("main", 9) for s in grow), grow
    assert all(s["label"].startswith(f"main at {src}:9") for s in grow)


FORTRAN_SRC = """module work
contains
  subroutine make(hot, cold)
    real(8), allocatable, intent(out) :: hot(:), cold(:)
    allocate(hot(2*1024*1024))
    allocate(cold(8*1024*1024))
    hot = 1.0d0
    cold = 2.0d0
  end subroutine
end module
program main
  use work
  real(8), allocatable :: h(:), c(:)
  integer :: k
  call make(h, c)
  do k = 1, 30
    h = h + 1.0d0
  end do
  print *, sum(h) + sum(c)
end program
"""


def test_fortran_program_is_profiled(tmp_path: Path) -> None:
    # gfortran's runtime installs a SIGSEGV handler of its own (backtraces):
    # the portable sampler's faults must not reach it
    from conftest import fortran_program, profile_and_show

    exe = fortran_program(tmp_path, "a", FORTRAN_SRC)
    proc, _, show = profile_and_show(tmp_path, "a", str(exe))
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[0]) == (2 << 20) * 31.0 + (8 << 20) * 2.0
    lines = sorted((Path(s["file"]).name, s["line"], s["bytes"]) for s in show["sites"])
    assert lines == [("a.f90", 5, 16 << 20), ("a.f90", 6, 64 << 20)]
    assert {s["function"] for s in show["sites"]} == {"work::make"}
    assert show["header"]["sampler"]["handler_lost"] is False


def test_interpreter_is_named_as_such(tmp_path, hetmem):
    # numpy's arrays all come from the same C frames: the user is told
    script = tmp_path / "s.py"
    script.write_text("import numpy as np\na = np.ones(1 << 20)\nb = np.ones(1 << 21)\n")
    proc = hetmem("profile", "-o", str(tmp_path / "py.prof"), "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr
    assert "is an interpreter" in proc.stderr
    proc = hetmem("profile", "-o", str(tmp_path / "c.prof"), "--", "ls", "/")
    assert "is an interpreter" not in proc.stderr


def test_a_run_lists_only_its_own_profiles(tmp_path, hetmem):
    # two runs in a row with the same -o: the second names only its file,
    # not the first one's (written less than a second before)
    out = str(tmp_path / "t.prof")
    first = hetmem("profile", "-o", out, "--", "/bin/true")
    second = hetmem("profile", "-o", out, "--", "/bin/true")
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    (a,) = re.findall(r"wrote (\S+)", first.stderr)
    (b,) = re.findall(r"wrote (\S+)", second.stderr)
    assert a != b
    assert "estimated overhead" in first.stderr  # the sampler's, as the profile records it
