# SPDX-License-Identifier: BSD-3-Clause
"""The compute kernels of workflow components (numpy; the GIL is released
inside each operation, so ranks in separate processes scale as processes).

stencil: `repeat` Jacobi sweeps of a 5-point stencil on a size x size grid
  of float64 (memory-bound: ~5 loads + 1 store per cell).
poly: Horner evaluation of a degree-`repeat` polynomial on `size` float64
  values in (-0.9, 0.9) (compute-bound at high degree), the IMDT study's
  polynomial kernel, same coefficients as bench/kernels/poly.c.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hetmem._numpy import np


class Kernel:
    """One rank's share of a kernel: ranks split the domain (strong scaling):
    stencil rows, poly elements."""

    def __init__(self, kind: str, size: int, repeat: int, ranks: int = 1) -> None:
        self.kind, self.size, self.repeat = kind, size, max(1, repeat)
        self.rows = max(3, size // max(1, ranks))
        rng = np.random.default_rng(12345)
        if kind == "stencil":
            self.a = rng.random((self.rows, size))
            self.b = self.a.copy()
        elif kind == "poly":
            self.x = rng.uniform(-0.9, 0.9, max(8, size // max(1, ranks)))
            self.y = np.empty_like(self.x)
            self.c = [0.4 / ((k + 1) ** 2) for k in range(self.repeat + 1)]
        self.checksum = 0.0

    def run(self, repeat: int | None = None) -> float:
        reps = self.repeat if repeat is None else repeat
        if self.kind == "stencil":
            a, b = self.a, self.b
            for _ in range(reps):
                # b[1:-1,1:-1] = 0.2 * (center + 4 neighbours)
                np.add(a[1:-1, 1:-1], a[:-2, 1:-1], out=b[1:-1, 1:-1])
                b[1:-1, 1:-1] += a[2:, 1:-1]
                b[1:-1, 1:-1] += a[1:-1, :-2]
                b[1:-1, 1:-1] += a[1:-1, 2:]
                b[1:-1, 1:-1] *= 0.2
                a, b = b, a
            self.a, self.b = a, b
            self.checksum = float(a[self.rows // 2, self.size // 2])
        elif self.kind == "poly":
            c = self.c if repeat is None else [0.4 / ((k + 1) ** 2) for k in range(reps + 1)]
            y = self.y
            y.fill(c[-1])
            for k in range(len(c) - 2, -1, -1):
                np.multiply(y, self.x, out=y)
                y += c[k]
            self.checksum = float(y[0])
        return self.checksum

    def units(self, repeat: int | None = None) -> float:
        """Work in cell-sweeps (stencil) or element-degrees (poly)."""
        reps = self.repeat if repeat is None else repeat
        if self.kind == "stencil":
            return float(self.rows * self.size * reps)
        if self.kind == "poly":
            return float(self.x.size * reps)
        return 0.0


def make(kind: str, size: int, repeat: int, ranks: int = 1) -> Kernel | None:
    return None if kind == "none" else Kernel(kind, size, repeat, ranks)


def time_once(fn: Callable[[], object], reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def repeat_for_seconds(kind: str, size: int, seconds: float) -> int:
    """The repeat count that makes one run take about `seconds` here."""
    k = Kernel(kind, size, 1)
    k.run(2)
    per = time_once(lambda: k.run(4)) / 4
    return max(1, round(seconds / per)) if per > 0 else 1


def seconds_per_run(
    kind: str, size: int, repeat: int, ranks: int = 1, evict_bytes: int = 0, reps: int = 5
) -> float:
    """Measured time of one rank's run (the model's compute term): the
    median of reps runs, each after streaming evict_bytes through the cache
    as the component's own I/O does between two compute phases."""
    if kind == "none":
        return 0.0
    k = Kernel(kind, size, repeat, ranks)
    k.run(1)
    junk = np.ones(max(1, min(evict_bytes, 256 << 20) // 8))
    times = []
    for _ in range(reps):
        if evict_bytes:
            junk.sum()
        t = time.perf_counter()
        k.run()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]
