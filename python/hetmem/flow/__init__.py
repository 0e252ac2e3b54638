# SPDX-License-Identifier: BSD-3-Clause
"""In situ workflows over memory tiers: a writer (simulation) and a reader
(analytics) component exchanging per-iteration objects through the channel.

spec: the TOML workflow description; kernels: the compute kernels; channel:
the Python binding of the C channel; component: one writer or reader rank;
runner: launches the components (plain processes or mpirun); model: the
analytical model behind `advise`; calibrate: the per-machine measurements it
needs; cpuload: the CPU load both of them read; sweep and replay: the model
against measured runs; bench: the channel against ADIOS2.
"""
