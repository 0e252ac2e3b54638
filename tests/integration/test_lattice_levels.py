# SPDX-License-Identifier: BSD-3-Clause
"""hm-lattice's multilevel (K-cycle) multigrid: the Galerkin identities on every
level (the `levels` self-test), results independent of the number of MPI ranks
with three levels, and bad `levels` input as a one-line error with exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from hetmem.bench import lattice
from hetmem.errors import UsageError

pytestmark = pytest.mark.skipif(
    not (shutil.which("mpirun") or shutil.which("mpiexec")), reason="no MPI on this machine"
)

# 8^4 with 2^4 aggregates: level 2 is 4^4 (4x4x4x2 per rank on 2 ranks),
# level 3 2^4 (2x2x2x1 per rank: its coarsest solve falls back from the
# odd-even reduction, which needs even local dimensions)
THREE = {
    "lattice": "8 8 8 8",
    "block": "2 2 2 2",
    "gauge": "heatbath",
    "sweeps": "3",
    "m0": "-0.3",
    "levels": "3",
    "test vectors": "6",
    "level 3 test vectors": "6",
    "setup iter": "1",
    "dirac reps": "1",
}


def selftest(ranks: int, settings: dict[str, str]) -> str:
    cmd = lattice.mpirun_command(ranks, [*lattice.settings_args(settings), "--selftest", "levels"])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=lattice.mpi_env(1), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("ranks", [1, 2])
def test_galerkin_identity_on_every_level(ranks):
    # level 4: pairs of level-3 sites along t, 6 test vectors (at most the
    # 2 x 6 dof per spin half of such an aggregate)
    four = {
        "levels": "4",
        "lattice": "8 8 8 16",
        "level 4 block": "1 1 1 2",
        "level 4 test vectors": "6",
    }
    out = selftest(ranks, {**THREE, **four})
    for lev in (2, 3, 4):
        assert f"levels: Galerkin D_{lev} = P^H D_{lev - 1} P" in out, out
    assert " FAIL" not in out and "4 levels" in out, out


def test_three_levels_independent_of_ranks():
    one = lattice.run_lattice(1, {**THREE, "solver": "amg"})
    two = lattice.run_lattice(2, {**THREE, "solver": "amg"})
    assert one["params"]["levels"] == two["params"]["levels"] == 3
    (s1,), (s2,) = one["solves"], two["solves"]
    for s in (s1, s2):
        assert s["converged"] and s["true_relres"] <= 1e-9, s
    assert s1["iterations"] == s2["iterations"], (s1, s2)
    assert one["phases"]["coarse_iterations"] == two["phases"]["coarse_iterations"]
    assert s2["true_relres"] == pytest.approx(s1["true_relres"], rel=0.05)


def test_three_levels_beat_cgnr():
    d = lattice.run_lattice(1, {**THREE, "solver": "all"})
    its = {s["solver"]: s["iterations"] for s in d["solves"]}
    assert its["amg"] * 5 < its["cgnr"], its


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"levels": "1"}, "bad value '1' for parameter 'levels' (2..4)"),
        ({"levels": "5"}, "bad value '5' for parameter 'levels' (2..4)"),
        ({"levels": "three"}, "bad value 'three' for parameter 'levels'"),
        ({"level 3 block": "3 2 2 2"}, "not divisible by 'level 3 block' 3"),
        ({"level 9 block": "2 2 2 2"}, "unknown parameter 'level 9 block'"),
        ({"level 3 test vectors": "97"}, "'level 3 test vectors' 97 exceeds the 96 dof"),
    ],
)
def test_bad_levels_is_one_line_exit_2(settings, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lattice.run_lattice(1, {**THREE, **settings})


KCYCLE_BENCH = REPO / "apps" / "lattice" / "tests" / "kcycle_bench.sh"


@pytest.mark.parametrize(
    "args,env,msg",
    [
        ([], {}, "usage: kcycle_bench.sh"),
        (["/nonexistent.cfg", "-0.7", "1", "OUT"], {"HM_LATTICE": "/bin/true"}, "cannot read"),
        (["GAUGE", "-0.7", "1", "OUT"], {"HM_LATTICE": "/nonexistent"}, "no hm-lattice at"),
        (["GAUGE", "-0.7", "0", "OUT"], {"HM_LATTICE": "/bin/true"}, "ROUNDS must be"),
        (
            ["GAUGE", "-0.7", "2", "OUT"],
            {"HM_LATTICE": "/bin/true", "HM_COARSE_SETUP": "x"},
            "HM_COARSE_SETUP must be",
        ),
    ],
)
def test_kcycle_bench_refuses_bad_input(
    tmp_path: Path, args: list[str], env: dict[str, str], msg: str
) -> None:
    gauge = tmp_path / "g.cfg"
    gauge.write_bytes(b"")
    argv = [str(gauge) if a == "GAUGE" else str(tmp_path / "o") if a == "OUT" else a for a in args]
    proc = subprocess.run(
        ["sh", str(KCYCLE_BENCH), *argv], capture_output=True, text=True,
        env={**os.environ, **env}, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], proc.stderr
    assert not (tmp_path / "o").exists()  # nothing ran


DD_COMPARE = REPO / "apps" / "lattice" / "tests" / "dd_compare.sh"


@pytest.mark.parametrize(
    "args,env,msg",
    [
        ([], {}, "usage: dd_compare.sh"),
        (["GAUGE", "-0.7", "1", "OUT"], {"HM_LATTICE": "/nonexistent"}, "no hm-lattice at"),
        (["GAUGE", "-0.7", "1", "OUT"], {"HM_LATTICE": "/bin/true"}, "set DD_ALPHA_AMG"),
        (
            ["/nonexistent.cfg", "-0.7", "1", "OUT"],
            {"HM_LATTICE": "/bin/true", "DD_ALPHA_AMG": "/bin/true"},
            "cannot read",
        ),
        (
            ["GAUGE", "-0.7", "two", "OUT"],
            {"HM_LATTICE": "/bin/true", "DD_ALPHA_AMG": "/bin/true"},
            "ROUNDS must be a positive integer",
        ),
        (
            ["GAUGE", "-0.7", "1", "OUT"],
            {"HM_LATTICE": "/bin/true", "DD_ALPHA_AMG": "/bin/true", "HM_COARSE_SETUP": "-1"},
            "HM_COARSE_SETUP must be a non-negative integer",
        ),
    ],
)
def test_dd_compare_refuses_bad_input(
    tmp_path: Path, args: list[str], env: dict[str, str], msg: str
) -> None:
    gauge = tmp_path / "g.cfg"
    gauge.write_bytes(b"")
    argv = [str(gauge) if a == "GAUGE" else str(tmp_path / "o") if a == "OUT" else a for a in args]
    base = {k: v for k, v in os.environ.items() if k != "DD_ALPHA_AMG"}
    proc = subprocess.run(
        ["sh", str(DD_COMPARE), *argv], capture_output=True, text=True,
        env={**base, **env}, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], proc.stderr
    assert not (tmp_path / "o").exists()  # nothing ran
