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

bwa (package bwa): `bwa mem -t 2` aligns 150-base reads, sampled from a
random reference with 1% substitutions (fixed seed), to that reference,
whose index (bwa index, built once per size and shared by the runs) holds
about 1.75 bytes per base; the batch of reads and their alignments are
small blocks, which cache mode pages with --small-blocks only. The output
(SAM, less its @PG line) must be byte for byte dram's.

LAMMPS (package lammps, program lmp): the bundled 3-d Lennard-Jones melt
example (lammps-examples' melt/in.melt: fcc lattice 0.8442, lj/cut 2.5, nve)
on an nx^3-cell box (4 nx^3 atoms) for LAMMPS_STEPS steps. LAMMPS holds about
LAMMPS_BYTES_PER_ATOM bytes per atom with this input (positions, velocities,
forces, the half neighbour list).
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetmem._numpy import np
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
    # cache mode with --small-blocks: the small blocks hold most of its memory
    small_blocks: bool = False

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


# ---------------------------------------------------------------- bwa

BWA_READ_LEN = 150
BWA_BYTES_PER_BASE = 4  # bwa mem's peak RSS here: 250 MiB for 60 Mbp and 200k reads
BWA_MIN_BASES = 1_000_000
BWA_BASES_PER_READ = 300
BWA_THREADS = 2


def bwa_size(footprint: int) -> dict[str, int]:
    """The reference length (bases) and read count for `footprint` bytes."""
    bases = max(BWA_MIN_BASES, footprint // BWA_BYTES_PER_BASE // 1000 * 1000)
    reads = bases // BWA_BASES_PER_READ
    return {"bases": bases, "reads": reads, "footprint": bases * BWA_BYTES_PER_BASE}


def _bwa_write_inputs(folder: Path, bases: int, reads: int) -> None:
    """ref.fa (one random sequence) and reads.fq (reads from both strands
    with 1% substitutions), from seed 1."""
    rng = np.random.default_rng(1)
    acgt = np.frombuffer(b"ACGT", dtype=np.uint8)
    seq = acgt[rng.integers(0, 4, bases, dtype=np.uint8)]
    with open(folder / "ref.fa", "wb") as f:
        f.write(b">chr1\n")
        for i in range(0, bases, 60):
            f.write(seq[i : i + 60].tobytes() + b"\n")
    pos = rng.integers(0, bases - BWA_READ_LEN, reads)
    r = seq[pos[:, None] + np.arange(BWA_READ_LEN)]
    comp = np.zeros(256, dtype=np.uint8)
    comp[acgt] = np.frombuffer(b"TGCA", dtype=np.uint8)
    flip = rng.random(reads) < 0.5
    r[flip] = comp[r[flip][:, ::-1]]
    sub = rng.random(r.shape) < 0.01
    r[sub] = acgt[rng.integers(0, 4, int(sub.sum()), dtype=np.uint8)]
    qual = b"I" * BWA_READ_LEN
    with open(folder / "reads.fq", "wb") as f:
        for i in range(reads):
            f.write(b"@r%d\n%s\n+\n%s\n" % (i, r[i].tobytes(), qual))


def _bwa_inputs(app_dir: Path, params: dict[str, int]) -> Path:
    """The reference, its index and the reads for params, made once in
    app_dir (the runs' parent folder) and shared by every run."""
    folder = app_dir / f"input-{params['bases']}-{params['reads']}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    _bwa_write_inputs(folder, params["bases"], params["reads"])
    with open(folder / "index.log", "wb") as log:
        rc = subprocess.run([APPS["bwa"].executable(), "index", str(folder / "ref.fa")],
                            stdout=log, stderr=log, check=False).returncode  # fmt: skip
    if rc != 0:
        raise EnvironmentProblem(f"bwa index failed (exit {rc}); see {folder / 'index.log'}")
    (folder / "done").write_text("")
    return folder


def bwa_prepare(work: Path, params: dict[str, int]) -> list[str]:
    inputs = _bwa_inputs(work.parent, params)
    return [APPS["bwa"].executable(), "mem", "-t", str(BWA_THREADS), "-o", "out.sam",
            str(inputs / "ref.fa"), str(inputs / "reads.fq")]  # fmt: skip


def parse_sam(data: bytes) -> dict[str, Any]:
    """Alignment records, those mapped, and a digest of the SAM less its
    @PG line (which names the command line)."""
    h = hashlib.sha256()
    records = mapped = 0
    for line in data.splitlines(keepends=True):
        if line.startswith(b"@PG"):
            continue
        h.update(line)
        if line.startswith(b"@"):
            continue
        records += 1
        fields = line.split(b"\t", 2)
        if len(fields) > 1 and fields[1].isdigit() and not int(fields[1]) & 4:
            mapped += 1
    failures = [] if records else ["bwa wrote no alignment"]
    return {"records": records, "mapped": mapped, "sam_sha256": h.hexdigest(),
            "failures": failures, "figures": {"records": records, "mapped": mapped}}  # fmt: skip


def bwa_read(work: Path) -> dict[str, Any]:
    path = work / "out.sam"
    if not path.exists():
        return {"failures": ["bwa wrote no out.sam"], "figures": {}}
    return parse_sam(path.read_bytes())


def compare_bwa(ref: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs between dram's alignments (ref) and a run's (got)."""
    out = list(got.get("failures", []))
    if out:
        return out
    for key in ("records", "mapped"):
        if ref.get(key) != got.get(key):
            out.append(f"{key} {got.get(key)} (dram {ref.get(key)})")
    if not out and ref.get("sam_sha256") != got.get("sam_sha256"):
        out.append("the alignments differ from dram's (SAM digest)")
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
    # its reads and alignments are small blocks (72-87 MiB at a 128 MiB
    # budget): without --small-blocks cache mode had not finished its first
    # batch after 630 s (swap: 18 s)
    "bwa": App(
        "bwa", "bwa", "bwa", bwa_size, bwa_prepare, bwa_read, compare_bwa, small_blocks=True
    ),
}
