"""Running a command under hetmem: `hetmem run` and what it builds on.

launch: the modes (dram, cache, swap, flat, hybrid) and the child's
environment; supervise: the owner records and the supervisor that cleans up
after a killed run; swap: the Linux swap baseline (swap file, memory cgroup);
cache: the per-machine cache of measurements.
"""
