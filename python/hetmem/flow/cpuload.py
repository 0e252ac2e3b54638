# SPDX-License-Identifier: BSD-3-Clause
"""The CPU load the flow model takes as an input: busy CPU seconds of the
machine, the other work sharing the cores, and the time stretch of ranks that
share them. Apart from the model so that calibration, which the model reads,
measures with the same figures without importing the model.
"""

from __future__ import annotations

import os
import time


def busy_cpu_seconds() -> float | None:
    """Busy CPU seconds of the whole machine so far (/proc/stat: user, nice,
    system, irq, softirq, steal); None where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:3]) + sum(v[5:8])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None


def external_load(seconds: float = 0.5) -> float:
    """Busy CPUs outside this process tree over a short idle interval
    (/proc/stat): the other work sharing the cores, which the model takes
    as an input (0 where /proc/stat cannot be read)."""
    b0, t0 = busy_cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    b1, t1 = busy_cpu_seconds(), time.monotonic()
    if b0 is None or b1 is None:
        return 0.0
    return max(0.0, (b1 - b0) / (t1 - t0))


def cpu_factor(k: float, load: float, cores: int) -> float:
    """Time stretch of each of k busy ranks when `load` other CPUs' worth of
    work shares `cores` cores fairly."""
    return max(1.0, (k + load) / max(1, cores))
