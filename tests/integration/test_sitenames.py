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
