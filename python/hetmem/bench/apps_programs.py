# SPDX-License-Identifier: BSD-3-Clause
"""The real applications of `hetmem bench apps`, as Debian installs them.

Each App says how a footprint becomes the application's problem size, writes
its input into a run folder, reads what the run printed there and compares
it with the all-DRAM run's: a different scientific result is a failure.

hpcc (HPC Challenge 1.5.0, package hpcc): one process (an MPI singleton, no
mpirun needed) runs HPL, PTRANS, DGEMM, STREAM, RandomAccess and FFT in that
order, each sized from HPL's N: the matrix is N^2 doubles, RandomAccess's
table the largest power of two of bytes within it (so 50-100% of it), STREAM's
three vectors and FFT's a share of it. The footprint is N^2 x 8 bytes; peak
RSS adds Open MPI's runtime (about 30 MiB). At a budget below the table,
RandomAccess's 4 random updates per table word fault on most updates.

LAMMPS (package lammps, program lmp): the bundled 3-d Lennard-Jones melt
example (lammps-examples' melt/in.melt: fcc lattice 0.8442, lj/cut 2.5, nve)
on an nx^3-cell box (4 nx^3 atoms) for LAMMPS_STEPS steps. LAMMPS holds about
LAMMPS_BYTES_PER_ATOM bytes per atom with this input (positions, velocities,
forces, the half neighbour list).
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetmem.errors import EnvironmentProblem

# A scientific value read from both runs matches when it is within this
# relative distance of dram's (or both are within ABS_TOL of zero): the same
# binary on the same input, where only the order of floating-point sums may
# differ between runs (OpenBLAS threads in HPL and DGEMM).
REL_TOL = 1e-6
ABS_TOL = 1e-12


@dataclass(frozen=True)
class App:
    """One application: its program, sizing, input, output and comparison."""

    name: str
    package: str
    program: str
    size: Callable[[int], dict[str, int]]
    prepare: Callable[[Path, dict[str, int]], list[str]]
    read: Callable[[Path], dict[str, Any]]
    compare: Callable[[dict[str, Any], dict[str, Any]], list[str]]
    # --threshold for its profile and tiered runs (None: hetmem's default):
    # what `hetmem run`'s note names when the small blocks take the budget
    threshold: int | None = None

    def executable(self) -> str:
        """Path of the program; EnvironmentProblem naming the package when absent."""
        path = shutil.which(self.program)
        if path is None:
            raise EnvironmentProblem(
                f"{self.name}: program '{self.program}' not found: install the Debian "
                f"package {self.package} (make deps does it as root)"
            )
        return path


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(REL_TOL * max(abs(a), abs(b)), ABS_TOL)


# ---------------------------------------------------------------- hpcc

HPCC_NB = 80  # HPL's block size, the value of hpcc's sample input
HPCC_MIN_N = 4 * HPCC_NB
# hpcc's max(|x-x0|) after a forward and inverse FFT of random data: about
# 1e-15 here; a run whose data was corrupted reads O(1)
HPCC_FFT_MAX_ERR = 1e-10
# sizes that hpcc derives from N: equal in every run of one input
HPCC_SIZES = ("HPL_N", "DGEMM_N", "PTRANS_n", "RandomAccess_N", "RandomAccess_LCG_N",
              "MPIRandomAccess_N", "MPIRandomAccess_LCG_N", "STREAM_VectorSize", "FFT_N",
              "MPIFFT_N", "MPIRandomAccess_Errors", "MPIRandomAccess_LCG_Errors")  # fmt: skip
# HPL's norms of the matrix, the right-hand side and the solution
HPCC_VALUES = ("HPL_Anorm1", "HPL_AnormI", "HPL_BnormI", "HPL_Xnorm1", "HPL_XnormI")
# what the run printed, worth showing beside its time
HPCC_FIGURES = ("HPL_Tflops", "SingleDGEMM_Gflops", "PTRANS_GBs", "SingleRandomAccess_GUPs",
                "MPIRandomAccess_GUPs", "SingleSTREAM_Triad", "SingleFFT_Gflops",
                "MPIFFT_Gflops")  # fmt: skip
_HPCC_COUNTS = {
    "ra_passed": re.compile(r"\(passed\)"),
    "ra_failed": re.compile(r"\(failed\)", re.IGNORECASE),
    # PTRANS prints a timing-dependent number of PASSED rows: only the
    # failures (and the residual check totals below) are compared
    "failed_rows": re.compile(r"\bFAILED\b"),
    "stream_validates": re.compile(r"^Solution Validates", re.MULTILINE),
    "stream_failed": re.compile(r"Failed Validation", re.IGNORECASE),
}
_HPCC_SUMS = {
    "residual_passed": re.compile(r"(\d+) tests completed and passed residual checks"),
    "residual_failed": re.compile(r"(\d+) tests completed and failed residual checks"),
    "node_errors": re.compile(r"Node\(s\) with error (\d+)"),
}
_HPCC_FAILED = ("ra_failed", "failed_rows", "stream_failed", "residual_failed", "node_errors")


def hpcc_size(footprint: int) -> dict[str, int]:
    """HPL's N for a footprint of N^2 doubles, a multiple of the block size."""
    n = math.isqrt(footprint // 8) // HPCC_NB * HPCC_NB
    n = max(n, HPCC_MIN_N)
    table = 1 << ((n * n * 8).bit_length() - 1)  # RandomAccess's, in bytes
    return {"N": n, "NB": HPCC_NB, "footprint": n * n * 8, "ra_table_bytes": table}


def hpcc_input(n: int, nb: int = HPCC_NB) -> str:
    """hpccinf.txt for one process (P = Q = 1) and one problem of size n.

    The HPL lines are those of hpcc's sample input; lines 33-36 add no
    PTRANS sizes of their own (PTRANS then runs at N / 2)."""
    lines = [
        "HPLinpack benchmark input file (hetmem bench apps)",
        "hpcc reads lines 5-31 and 33-36; lines 1-4 and 32 are ignored",
        "HPL.out      output file name (if any)",
        "8            device out (6=stdout,7=stderr,file)",
        "1            # of problems sizes (N)",
        f"{n}         Ns",
        "1            # of NBs",
        f"{nb}           NBs",
        "0            PMAP process mapping (0=Row-,1=Column-major)",
        "1            # of process grids (P x Q)",
        "1            Ps",
        "1            Qs",
        "16.0         threshold",
        "1            # of panel fact",
        "2            PFACTs (0=left, 1=Crout, 2=Right)",
        "1            # of recursive stopping criterium",
        "4            NBMINs (>= 1)",
        "1            # of panels in recursion",
        "2            NDIVs",
        "1            # of recursive panel fact.",
        "1            RFACTs (0=left, 1=Crout, 2=Right)",
        "1            # of broadcast",
        "1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)",
        "1            # of lookahead depth",
        "1            DEPTHs (>=0)",
        "2            SWAP (0=bin-exch,1=long,2=mix)",
        "64           swapping threshold",
        "0            L1 in (0=transposed,1=no-transposed) form",
        "0            U  in (0=transposed,1=no-transposed) form",
        "1            Equilibration (0=no,1=yes)",
        "8            memory alignment in double (> 0)",
        "##### This line (no. 32) is ignored (it serves as a separator). ######",
        "0            Number of additional problem sizes for PTRANS",
        "0            values of N",
        "0            number of additional blocking sizes for PTRANS",
        "0            values of NB",
    ]
    return "\n".join(lines) + "\n"


def hpcc_prepare(work: Path, params: dict[str, int]) -> list[str]:
    (work / "hpccinf.txt").write_text(hpcc_input(params["N"], params["NB"]))
    return [APPS["hpcc"].executable()]


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def parse_hpcc(text: str) -> dict[str, Any]:
    """hpccoutf.txt: its summary (key=value), the validation counts, the
    largest FFT error and the failures among them ([] when all passed)."""
    summary: dict[str, float | str] = {}
    m = re.search(r"Begin of Summary section\.\n(.*?)End of Summary section\.", text, re.S)
    for line in (m.group(1) if m else "").splitlines():
        key, sep, val = line.partition("=")
        if sep:
            summary[key.strip()] = _number(val.strip())
    checks = {k: len(rx.findall(text)) for k, rx in _HPCC_COUNTS.items()}
    checks |= {k: sum(int(x) for x in rx.findall(text)) for k, rx in _HPCC_SUMS.items()}
    errs = [float(x) for x in re.findall(r"max\(\|x-x0\|\):\s*(\S+)", text)]
    fft_err = max(errs) if errs else None
    failures = _hpcc_failures(summary, checks, fft_err)
    figures = {k: summary[k] for k in HPCC_FIGURES if k in summary}
    return {"summary": summary, "checks": checks, "fft_max_err": fft_err,
            "failures": failures, "figures": figures}  # fmt: skip


def _hpcc_failures(
    summary: dict[str, float | str], checks: dict[str, int], fft_err: float | None
) -> list[str]:
    """What hpcc itself reports as failed: validation counts, Success, FFT error."""
    failures = [f"{k} {checks[k]}" for k in _HPCC_FAILED if checks[k]]
    if summary.get("Success") != 1.0:
        failures.append("hpcc summary says Success=" + str(summary.get("Success", "(missing)")))
    if fft_err is None or fft_err > HPCC_FFT_MAX_ERR:
        failures.append(f"FFT max(|x-x0|) {fft_err} (limit {HPCC_FFT_MAX_ERR:g})")
    return failures


def hpcc_read(work: Path) -> dict[str, Any]:
    path = work / "hpccoutf.txt"
    if not path.exists():
        return {"failures": ["hpcc wrote no hpccoutf.txt"], "figures": {}}
    return parse_hpcc(path.read_text(errors="replace"))


def compare_hpcc(ref: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs between dram's hpcc output (ref) and a run's (got)."""
    out = list(got.get("failures", []))
    if out:
        return out
    rs, gs = ref.get("summary", {}), got.get("summary", {})
    for key in HPCC_SIZES:
        if rs.get(key) != gs.get(key):
            out.append(f"{key} {gs.get(key)} (dram {rs.get(key)})")
    for key in HPCC_VALUES:
        a, b = rs.get(key), gs.get(key)
        if not (isinstance(a, float) and isinstance(b, float) and close(a, b)):
            out.append(f"{key} {b} (dram {a})")
    for key, n in ref.get("checks", {}).items():
        if got["checks"].get(key) != n:
            out.append(f"{key} {got['checks'].get(key)} (dram {n})")
    return out


# ---------------------------------------------------------------- LAMMPS

MELT_INPUT = Path("/usr/share/lammps/examples/melt/in.melt")
LAMMPS_STEPS = 50
# LAMMPS's own "Per MPI rank memory allocation" with this input: 87.0 MB for
# 256000 atoms (nx 40) and 22.6 MB for 32000 (nx 20): 337 bytes per atom
LAMMPS_BYTES_PER_ATOM = 340
LAMMPS_MIN_NX = 4
_THERMO = re.compile(r"^\s*(Step\s+.*?)\n(.*?)^Loop time of (\S+) on (\d+) procs for (\d+) "
                     r"steps with (\d+) atoms", re.M | re.S)  # fmt: skip


def lammps_size(footprint: int) -> dict[str, int]:
    """The box edge nx (cells) whose 4 nx^3 atoms hold about `footprint` bytes."""
    atoms = footprint / LAMMPS_BYTES_PER_ATOM
    nx = max(LAMMPS_MIN_NX, round((atoms / 4) ** (1 / 3)))
    return {"nx": nx, "atoms": 4 * nx**3, "steps": LAMMPS_STEPS,
            "footprint": 4 * nx**3 * LAMMPS_BYTES_PER_ATOM}  # fmt: skip


def lammps_input(example: str) -> str:
    """The melt example with its box edge and run length made variables
    (${nx}, ${steps}), thermo output at the start and at the end."""
    text, n_box = re.subn(
        r"^region\s+box\s+block\s+.*$",
        "region\t\tbox block 0 ${nx} 0 ${nx} 0 ${nx}",
        example,
        flags=re.M,
    )
    text, n_run = re.subn(r"^run\s+\S+.*$", "run\t\t${steps}", text, flags=re.M)
    text = re.sub(r"^thermo\s+\S+.*$", "thermo\t\t${steps}", text, flags=re.M)
    if n_box != 1 or n_run != 1:
        raise EnvironmentProblem(
            f"{MELT_INPUT}: not the LJ melt example this bench knows (region box, run lines)"
        )
    return text


def lammps_prepare(work: Path, params: dict[str, int]) -> list[str]:
    if not MELT_INPUT.is_file():
        raise EnvironmentProblem(
            f"lammps: {MELT_INPUT} not found: install the Debian package lammps-examples"
        )
    (work / "in.melt").write_text(lammps_input(MELT_INPUT.read_text()))
    return [APPS["lammps"].executable(), "-in", "in.melt", "-var", "nx", str(params["nx"]),
            "-var", "steps", str(params["steps"]), "-log", "log.lammps",
            "-screen", "none"]  # fmt: skip


def parse_lammps(text: str) -> dict[str, Any]:
    """log.lammps: the last thermo row of the run (by column), its loop time,
    steps and atoms; failures when the run did not finish."""
    runs = list(_THERMO.finditer(text))
    if not runs or "Total wall time" not in text:
        return {"failures": ["LAMMPS log has no finished run"], "figures": {}}
    m = runs[-1]
    cols = m.group(1).split()
    rows = [r.split() for r in m.group(2).splitlines() if r.strip()]
    last = rows[-1] if rows else []
    if len(last) != len(cols):
        return {"failures": ["LAMMPS log: thermo row and header differ"], "figures": {}}
    thermo = {c: float(v) for c, v in zip(cols, last, strict=True)}
    loop = float(m.group(3))
    steps, atoms = int(m.group(5)), int(m.group(6))
    figures = {"loop_time_s": loop, "atom_steps_per_s": atoms * steps / loop if loop else None}
    return {"thermo": thermo, "steps": steps, "atoms": atoms, "failures": [],
            "figures": figures}  # fmt: skip


def lammps_read(work: Path) -> dict[str, Any]:
    path = work / "log.lammps"
    if not path.exists():
        return {"failures": ["LAMMPS wrote no log.lammps"], "figures": {}}
    return parse_lammps(path.read_text(errors="replace"))


def compare_lammps(ref: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs between dram's final thermo row (ref) and a run's (got)."""
    out = list(got.get("failures", []))
    if out:
        return out
    for key in ("steps", "atoms"):
        if ref.get(key) != got.get(key):
            out.append(f"{key} {got.get(key)} (dram {ref.get(key)})")
    for key, a in ref.get("thermo", {}).items():
        b = got["thermo"].get(key)
        if b is None or not close(a, b):
            out.append(f"{key} {b} (dram {a})")
    return out


APPS: dict[str, App] = {
    "hpcc": App("hpcc", "hpcc", "hpcc", hpcc_size, hpcc_prepare, hpcc_read, compare_hpcc),
    # its neighbour list lives in 390 KiB pages (MyPage): below 1 MiB they
    # would hold most of the budget outside the pager
    "lammps": App(
        "lammps",
        "lammps",
        "lmp",
        lammps_size,
        lammps_prepare,
        lammps_read,
        compare_lammps,
        threshold=256 << 10,
    ),
}
