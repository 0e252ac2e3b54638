# SPDX-License-Identifier: BSD-3-Clause
"""One run of the user's command under one mode, as `hetmem run` does it.

Every run is a `hetmem run --stats` subprocess, exactly the command line the
recommendation will tell the user to type, so what is measured is what they
will get. The time is the command's own wall time as `hetmem run` measured
it (`wall_s`: spawn to exit), which leaves out the start-up of the Python
around it and the swap file's set-up. The command's output goes to a log
file per mode (the last run of each), so a failure can be read afterwards.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import child
from hetmem.errors import HetmemError
from hetmem.sizes import size_arg

# The variant of cache mode that pages small blocks too (--small-blocks),
# measured as a mode of its own when they held much of the budget.
SMALL = "cache-small"


@dataclass
class Setup:
    """What every run of one recommendation shares."""

    argv: list[str]
    budget: int
    storage: Path
    workdir: Path
    threshold: int | None = None
    placement: Path | None = None  # flat mode's (`hetmem advise`)
    placement_hybrid: Path | None = None  # hybrid's (`hetmem advise --for hybrid`)
    swap_size: int | None = None
    timeout_s: float | None = None
    budget_text: str = ""  # the budget as the user wrote it (4G), for the command line

    def run_options(self, mode: str) -> list[str]:
        """`hetmem run`'s options for `mode`, as the user would type them
        (SMALL: cache mode with --small-blocks)."""
        small = mode == SMALL
        mode = "cache" if small else mode
        opts = ["--mode", mode]
        if mode != "dram":
            budget = self.budget_text or str(self.budget)
            opts += ["--fast-budget", budget, "--storage", str(self.storage)]
        if self.threshold is not None and mode in ("cache", "flat", "hybrid"):
            opts += ["--threshold", str(self.threshold)]
        if small:
            opts.append("--small-blocks")
        placement = self.placement_hybrid if mode == "hybrid" else self.placement
        if mode in ("flat", "hybrid") and placement is not None:
            opts += ["--placement", str(placement)]
        if mode == "swap" and self.swap_size is not None:
            opts += ["--swap-size", size_arg(self.swap_size)]
        return opts

    def command_line(self, mode: str) -> str:
        """The line to use from now on (no --stats: the user's own runs)."""
        return shlex.join(["hetmem", "run", *self.run_options(mode), "--", *self.argv])


@dataclass
class Run:
    """One run's outcome: `seconds` when it went well, else `error`."""

    mode: str
    round: int
    exit_code: int
    seconds: float | None
    error: str = ""
    kind: str = ""  # "", "oom" (killed in its memory limit), "setup", "exit", "timeout"
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.seconds is not None

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "round": self.round, "exit_code": self.exit_code,
                "seconds": self.seconds, "error": self.error, "error_kind": self.kind}  # fmt: skip


def _hetmem_argv(setup: Setup, mode: str, stats: Path) -> list[str]:
    opts = setup.run_options(mode)
    return [sys.executable, "-m", "hetmem", "run", *opts, "--stats", str(stats), "--", *setup.argv]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _last_line(path: Path, rc: int) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1].strip() if lines else f"exit status {rc}, no message on stderr"


def run_once(setup: Setup, mode: str, rnd: int) -> Run:
    """Runs the command once under `mode`; never raises for the command's
    own failure (that is a result: swap killed by the OOM killer is what a
    user of swap would get), only HetmemError for hetmem's own (the log
    folder cannot be written)."""
    logs = setup.workdir / "logs"
    stats = logs / f"{mode}.stats.json"
    out, err = logs / f"{mode}.out", logs / f"{mode}.err"
    stats.unlink(missing_ok=True)
    try:
        with open(out, "wb") as fo, open(err, "wb") as fe:
            got = child.run(
                _hetmem_argv(setup, mode, stats), timeout=setup.timeout_s, stdout=fo, stderr=fe
            )
    except OSError as exc:
        raise HetmemError(f"cannot write the run logs in '{logs}': {exc.strerror}") from None
    if got.timed_out:
        # what `hetmem run` wrote when stopped: the data seen so far
        limit = f"over the time limit ({setup.timeout_s:.0f} s)"
        return Run(mode, rnd, -1, None, limit, "timeout", _read_json(stats))
    return _outcome(mode, rnd, got.returncode, _read_json(stats), err)


def _outcome(mode: str, rnd: int, rc: int, st: dict[str, Any], err: Path) -> Run:
    if rc == 0 and isinstance(st.get("wall_s"), int | float):
        return Run(mode, rnd, 0, float(st["wall_s"]), stats=st)
    if not st:
        # no statistics: `hetmem run` refused before the command started
        return Run(mode, rnd, rc, None, _last_line(err, rc), "setup")
    oom = ((st.get("swap") or {}).get("oom_kill")) or 0
    kind = "oom" if oom else "exit"
    text = "killed by the OOM killer in its memory limit" if oom else _last_line(err, rc)
    return Run(mode, rnd, rc, None, text, kind, st)
