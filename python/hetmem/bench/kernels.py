# SPDX-License-Identifier: BSD-3-Clause
"""The benchmark kernels (bench/kernels/*.c, programs hm-kernel-<name>).

Each kernel allocates its data with plain malloc (so `hetmem run` governs
where it lives), verifies its own result and prints one line of JSON
(schema_version 1, documented in docs/formats.md). Exit codes: 0 verified,
2 bad arguments, 3 wrong result, 4 out of memory or a library failure.

kernel_path() finds a kernel binary; run_kernel() runs one and returns its
parsed result, raising a HetmemError subclass on any failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hetmem.bench import find_program
from hetmem.errors import HetmemError, SchemaError, UsageError

SCHEMA_VERSION = 1
KERNELS = ("stream", "poly", "scan", "gemm", "lu", "fft", "chase", "gups")
PREFIX = "hm-kernel-"

# Fields every kernel result has; kernel-specific ones come on top.
COMMON_FIELDS = (
    "schema_version",
    "kernel",
    "variant",
    "bytes",
    "threads",
    "reps",
    "times_s",
    "time_s",
    "time_stat",
    "bytes_moved",
    "flops",
    "gbs",
    "gflops",
    "verified",
)


class KernelFailed(HetmemError):
    """A kernel exited non-zero (other than for bad arguments)."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


class KernelVerificationError(KernelFailed):
    """A kernel computed a wrong result (exit code 3)."""


def kernel_path(name: str) -> Path:
    """Path of the hm-kernel-<name> program; EnvironmentProblem if none is built."""
    if name not in KERNELS:
        raise UsageError(f"unknown kernel '{name}' (known: {', '.join(KERNELS)})")
    return find_program(f"{PREFIX}{name}")


def parse_result(stdout: str) -> dict[str, Any]:
    """The one JSON line a kernel prints; SchemaError if it is not one."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise SchemaError(f"kernel printed {len(lines)} lines on stdout, expected one JSON line")
    try:
        data = json.loads(lines[0])
    except ValueError as e:
        raise SchemaError(f"kernel output is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise SchemaError("kernel output is not a JSON object")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise SchemaError(
            f"kernel result schema_version {data.get('schema_version')!r}, "
            f"expected {SCHEMA_VERSION}"
        )
    missing = [f for f in COMMON_FIELDS if f not in data]
    if missing:
        raise SchemaError(f"kernel result lacks {', '.join(missing)}")
    if data["verified"] is not True:
        raise SchemaError("kernel result is not verified")
    return data


def run_kernel(
    name: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Runs hm-kernel-<name> with args (env on top of os.environ); its result."""
    path = kernel_path(name)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run(
            [str(path), *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise KernelFailed(f"{PREFIX}{name} timed out after {timeout} s", -1) from None
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        if proc.returncode == 2:
            raise UsageError(msg)
        if proc.returncode == 3:
            raise KernelVerificationError(msg, proc.returncode)
        raise KernelFailed(msg, proc.returncode)
    return parse_result(proc.stdout)
