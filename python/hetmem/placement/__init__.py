# SPDX-License-Identifier: BSD-3-Clause
"""Profile-guided placement: what a run allocated, where each site should go.

profile: the interposer's profile files (read, merge); sitenames: the names
people can tell apart; symbolize: frames to function and source line;
problem: the advisor's model (tiers, cost, capacity checks); solve: its
solvers (integer program, greedy); advise: the advisor behind `hetmem
advise`, from the solution to the placement; fileformat: the placement file
and the compact table the interposer reads; limits: the advisor's limits
that the CLI shows without importing numpy.
"""
