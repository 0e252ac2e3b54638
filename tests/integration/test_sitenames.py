# SPDX-License-Identifier: BSD-3-Clause
"""Site names people can tell apart (hetmem.placement.sitenames), and what profile
show, advise and the placement file make of them."""

from __future__ import annotations

from pathlib import Path

from hetmem.placement.sitenames import distinct_labels, first_user_frame, short


def test_a_unique_frame_is_the_name() -> None:
    frames = [["a (x+0x10)", "main (x+0x50)"], ["b (x+0x20)", "main (x+0x60)"]]
    assert distinct_labels(frames, [0, 0]) == ["a (x+0x10)", "b (x+0x20)"]


def test_a_shared_frame_gains_the_first_caller_that_differs() -> None:
    # a helper called from two places in f, and from g through f's same line
    frames = [
        ["helper", "f (x+0x30)", "main"],
        ["helper", "f (x+0x40)", "main"],
        ["helper", "f (x+0x30)", "g", "main"],
    ]
    labels = distinct_labels(frames, [0, 0, 0])
    assert len(set(labels)) == 3
    assert labels[1] == "helper <- f (x+0x40)"
    # 0 and 2 agree on their first caller: it takes the second to differ
    assert labels[0] == "helper <- ... <- main"
    assert labels[2] == "helper <- ... <- g"


def test_runtime_frames_are_skipped_before_comparing() -> None:
    paths = ["/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/opt/app/bin/app", "/opt/app/bin/app"]
    assert first_user_frame(paths) == 1
    assert first_user_frame(["/lib/libc.so.6"]) == 0
    frames = [["operator new", "make (app+0x10)", "main (app+0x50)"],
              ["operator new", "make (app+0x10)", "main (app+0x60)"]]  # fmt: skip
    assert distinct_labels(frames, [1, 1]) == [
        "make (app+0x10) <- main (app+0x50)",
        "make (app+0x10) <- main (app+0x60)",
    ]


def test_qualified_names_drop_return_type_and_parameters() -> None:
    from hetmem.placement.sitenames import qualified_name

    assert qualified_name("main (app+0x10)") == "main"
    assert (
        qualified_name(
            "void std::vector<cj, A<cj, std::allocator<cj> > >::_M_realloc_insert<cj const&>"
            "(__gnu_cxx::__normal_iterator<cj*, std::vector<cj> >, cj const&) (lib.so+0x4f)"
        )
        == "std::vector<cj, A<cj, std::allocator<cj> > >::_M_realloc_insert<cj const&>"
    )
    # a program's template returning a standard type is the program's
    assert qualified_name("std::vector<double> gmx::make<int>(int) at /s/a.cc:3") == (
        "gmx::make<int>"
    )
    assert qualified_name("Foo::operator()(int) const (app+0x1)") == "Foo::operator()"
    assert qualified_name("(anonymous namespace)::grow(int) (app+0x1)") == "{anon}::grow"


def test_standard_templates_out_of_line_are_runtime_frames() -> None:
    # a Debian package's libgromacs: std::vector's growth instantiated in the
    # library, no debug information; every vector of it would read the same
    from hetmem.placement.sitenames import site_functions

    lib = "/lib/x86_64-linux-gnu/libgromacs.so.7"
    grow = "void std::vector<cj>::_M_realloc_insert<cj const&>(cj const&)"
    texts, start, where = site_functions(
        ["/lib/libstdc++.so.6", lib, lib],
        [0x10, 0x4F3A24, 0x4EE241],
        ["operator new(unsigned long)", grow, "PairlistSet::construct(int)"],
    )
    assert start == 2 and where == (2, 0)
    assert texts[2] == "PairlistSet::construct(int) (libgromacs.so.7+0x4ee241)"


def test_a_frame_without_symbol_is_named_by_its_first_caller_with_one() -> None:
    from hetmem.placement.sitenames import frame_functions

    assert frame_functions("/lib/libg.so.7", 0x4E3CA2, "??") == ["libg.so.7+0x4e3ca2"]
    # a source line without a function name is still worth showing
    assert frame_functions("/lib/x", 0x10, "?? at /s/a.c:3") == ["?? at /s/a.c:3 (x+0x10)"]
    frames = [
        ["libg.so.7+0x4e3ca2", "libg.so.7+0x4ea05e", "GOMP_parallel (libgomp.so.1+0x140b6)",
         "PairlistSet::construct(int) (libg.so.7+0x4ee241)", "main (app+0x99)"],
        ["libg.so.7+0xcf4248", "gmx_fio_positions() (libg.so.7+0xcf528a)", "main (app+0x90)"],
    ]  # fmt: skip
    assert distinct_labels(frames, [0, 0]) == [
        "libg.so.7+0x4e3ca2 <- ... <- PairlistSet::construct(int) (libg.so.7+0x4ee241)",
        "libg.so.7+0xcf4248 <- gmx_fio_positions() (libg.so.7+0xcf528a)",
    ]
    # a second site of the same frame: the caller that differs is shown too,
    # in stack order, and a thread's start in libgomp names no code
    frames.append(["libg.so.7+0x4e3ca2", "libg.so.7+0x4ea05e", "libgomp.so.1+0x1cd8e",
                   "start_thread (libc.so.6+0x891f5)"])  # fmt: skip
    labels = distinct_labels(frames, [0, 0, 0])
    assert labels[0] == (
        "libg.so.7+0x4e3ca2 <- ... <- GOMP_parallel (libgomp.so.1+0x140b6) <- "
        "PairlistSet::construct(int) (libg.so.7+0x4ee241)"
    )
    assert labels[2] == "libg.so.7+0x4e3ca2 <- ... <- libgomp.so.1+0x1cd8e"


def test_short_names_keep_base_names_of_sources() -> None:
    label = "f at /home/u/src/a.c:7 (app+0x10) <- main at /home/u/src/m.c:30 (app+0x99)"
    assert short(label) == "f at a.c:7 (app+0x10) <- main at m.c:30 (app+0x99)"
    assert short("app+0x10") == "app+0x10"


def test_stacks_cut_at_the_depth_keep_their_frame() -> None:
    frames = [["helper", "f"], ["helper", "f", "main"]]
    assert distinct_labels(frames, [0, 0]) == ["helper", "helper <- ... <- main"]


# Two arrays from one helper, called on two lines that gfortran -O2 gives
# the same line number (the program statement's): only the module offsets
# of the calls tell the sites apart.
FORTRAN_SRC = """module fields
contains
  subroutine make_hot(a, n)
    real(8), allocatable, intent(out) :: a(:)
    integer, intent(in) :: n
    allocate(a(n)); a = 1.0d0
  end subroutine
end module
program heat
  use fields
  real(8), allocatable :: u(:), v(:)
  call make_hot(u, 1024*1024)
  call make_hot(v, 2*1024*1024)
  print *, sum(u) + sum(v)
end program
"""


def test_a_helper_called_twice_is_two_sites_by_name(tmp_path: Path) -> None:
    from conftest import fortran_program, profile_and_show, run_hetmem

    exe = fortran_program(tmp_path, "heat", FORTRAN_SRC)
    src = tmp_path / "heat.f90"
    _, path, show = profile_and_show(tmp_path, "h", str(exe))
    sites = [s for s in show["sites"] if s["function"] == "fields::make_hot"]
    assert len(sites) == 2
    a, b = (s["label"] for s in sites)
    assert a != b
    assert a.startswith("fields::make_hot at ") and " <- " in a
    # the table (piped: not cut to 80 columns) shows both names whole, with
    # the source files' base names
    assert short(a) == a.replace(str(src), "heat.f90")
    table = run_hetmem("profile", "show", str(path), check=True).stdout
    assert short(a) in table and short(b) in table
    # advise's table and the placement file name the sites the same way
    placement = tmp_path / "h.toml"
    out = run_hetmem(
        "advise", str(path), "--fast-budget", "64MiB", "-o", str(placement), check=True
    ).stdout
    assert short(a) in out and short(b) in out
    text = placement.read_text()
    assert f"[[sites]]  # {a}" in text and f"[[sites]]  # {b}" in text


def test_inlined_functions_expand_a_frame() -> None:
    from hetmem.placement.sitenames import site_functions

    lib = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    sym = (
        "std::vector<double>::resize(unsigned long) at /usr/include/c++/12/bits/stl_vector.h:1011"
        " <- Domain::Domain(unsigned long) at /src/a.cc:12 <- main at /src/a.cc:30"
    )
    texts, start, where = site_functions([lib, "/src/app"], [0x10, 0x1309], ["new", sym])
    assert texts == [
        "new (libstdc++.so.6+0x10)",
        "std::vector<double>::resize(unsigned long) at /usr/include/c++/12/bits/stl_vector.h:1011",
        "Domain::Domain(unsigned long) at /src/a.cc:12",
        "main at /src/a.cc:30 (app+0x1309)",
    ]
    # the runtime library and the runtime's inlined header are skipped
    assert start == 2 and where == (1, 1)


# An -O3 C++ program whose allocations are all inlined into main: a vector
# resized in an inlined constructor, and a template allocator called twice
# from an inlined time step. Each frame is main's, at the line of the
# outermost inlined call; only the inline chain tells the sites apart.
CXX_SRC = r"""#include <cstdio>
#include <cstdlib>
#include <vector>
template <typename T> static inline T *Allocate(size_t n) {
  return static_cast<T *>(malloc(n * sizeof(T)));  // ALLOCATE
}
struct Domain {
  std::vector<double> x, y, z;
  explicit Domain(size_t n) {
    x.resize(n);  // X
    y.resize(n);  // Y
    z.resize(n);  // Z
  }
};
static inline double Integrate(Domain &d, size_t n) {
  double *a = Allocate<double>(n);  // A
  double *b = Allocate<double>(n);  // B
  double s = 0;
  for (size_t i = 0; i < n; i++) {
    a[i] = d.x[i] + 1.0;
    b[i] = d.y[i] + d.z[i] + 2.0;
  }
  for (size_t i = 0; i < n; i += 512) s += a[i] + b[i];
  free(a);
  free(b);
  return s;
}
int main() {
  size_t n = (size_t)1 << 18;
  Domain d(n);
  double s = 0;
  for (int it = 0; it < 3; it++) s += Integrate(d, n);
  std::printf("%.1f\n", s);
  return 0;
}
"""


def test_sites_inlined_into_one_caller_have_their_own_lines(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from conftest import profile_and_show

    gxx = shutil.which("g++")
    if not gxx:
        import pytest

        pytest.skip("no g++")
    src = tmp_path / "app.cc"
    src.write_text(CXX_SRC)
    exe = tmp_path / "app"
    subprocess.run([gxx, "-O3", "-g", str(src), "-o", str(exe)], check=True)
    tags = ("ALLOCATE", "X", "Y", "Z", "A", "B")
    line = {tag: n for n, text in enumerate(CXX_SRC.splitlines(), 1)
            for tag in tags if text.endswith(f"// {tag}")}  # fmt: skip
    proc, _, show = profile_and_show(tmp_path, "c", str(exe))
    assert proc.returncode == 0, proc.stderr
    labels = sorted(short(s["label"]) for s in show["sites"])
    assert labels == sorted(
        [f"Domain::Domain(unsigned long) at app.cc:{line[t]}" for t in "XYZ"]
        + [f"Allocate<double> at app.cc:{line['ALLOCATE']} <- Integrate at app.cc:{line[t]}"
           for t in "AB"]
    ), labels  # fmt: skip
    # the row's place is the innermost function outside the runtimes
    rows = {s["line"] for s in show["sites"]}
    assert rows == {line["X"], line["Y"], line["Z"], line["ALLOCATE"]}
