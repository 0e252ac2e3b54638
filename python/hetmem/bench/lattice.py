"""`hetmem bench lattice`: the lattice QCD mini-app's benchmarks (see hetmem.lattice)."""

from __future__ import annotations

from hetmem.lattice import add_arguments, run

name = "lattice"
help = "lattice QCD mini-app: Dirac bandwidth vs bound, AMG vs CGNR, scaling, halo exchange"
description = (
    "Runs the Wilson-clover mini-app (apps/lattice): the Dirac operator's bandwidth\n"
    "against the bound from bytes per site and the probed DRAM bandwidth, two-level\n"
    "AMG against CGNR with setup amortized over 4 right-hand sides, strong scaling\n"
    "over 1 and 2 ranks and a halo-exchange benchmark; prints the mpirun command\n"
    "that runs the same on many nodes."
)

__all__ = ["add_arguments", "description", "help", "name", "run"]
