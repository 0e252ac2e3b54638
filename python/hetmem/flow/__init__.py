"""In situ workflows over memory tiers: a writer (simulation) and a reader
(analytics) component exchanging per-iteration objects through the channel.

spec: the TOML workflow description; kernels: the compute kernels; runner:
launches the components (plain processes or mpirun); model: the analytical
model behind `advise`; calibrate: the per-machine measurements it needs;
bench: the channel against ADIOS2.
"""
