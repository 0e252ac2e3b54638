# SPDX-License-Identifier: BSD-3-Clause
"""Running a command under hetmem: `hetmem run` and what it builds on.

launch: the modes (dram, cache, swap, flat, hybrid), with place (flat and
hybrid) and what they share: config (RunConfig, the interposer's
environment), checks (before the command starts), proc (the child process
and its signals), report (the interposer's end-of-run figures);
supervise: the owner records and the supervisor that cleans up after a
killed run; swap: the Linux swap baseline (swap file, memory cgroup);
cache: the per-machine cache of measurements.
"""
