# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench tiering`: the kernel's own memory tiering, the baseline a
CXL or Optane (KMEM-DAX) user would otherwise pick, side by side with
hetmem's flat and hybrid placement of the same command.

  kernel  demotion on (/sys/kernel/mm/numa/demotion_enabled) and NUMA
          balancing in tiering mode (kernel.numa_balancing = 2): cold pages
          demoted to the slower tier under pressure, hot ones promoted
  flat    hetmem run --mode flat --placement FILE
  hybrid  hetmem run --mode hybrid --placement FILE

Rounds run every configuration once, in an order that rotates. Each run
reports its wall time and what the kernel moved, from /proc/vmstat
(pgdemote_*, pgpromote_*, numa_hint_faults, pgmigrate_success). The two
settings are root's to change; they are restored afterwards, also when a
run fails, Ctrl-C stops it or SIGTERM or SIGHUP ends it (then the exit
status is 128 + the signal's number, as a shell reports it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hetmem import child, output
from hetmem.bench import exit_status
from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.sizes import format_size, parse_budget

name = "tiering"
help = "the kernel's tiering (demotion, NUMA balancing) vs flat and hybrid placement"
description = __doc__.split("\n\n", 1)[1] + (
    "\nExample:\n"
    "  hetmem advise app.prof --no-storage --fast-budget 8G -o p.toml\n"
    "  hetmem bench tiering --placement p.toml --fast-budget 8G -- ./app"
)
SCHEMA_VERSION = 1
CONFIGS = ("kernel", "flat", "hybrid")
DEMOTION = Path("/sys/kernel/mm/numa/demotion_enabled")
BALANCING = Path("/proc/sys/kernel/numa_balancing")
COUNTERS = (
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgpromote_success",
    "pgpromote_candidate",
    "numa_hint_faults",
    "pgmigrate_success",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--placement", type=Path, metavar="FILE", required=True,
                        help="placement from `hetmem advise` (flat and hybrid)")  # fmt: skip
    parser.add_argument("--fast-budget", metavar="SIZE", required=True,
                        help="fast-tier budget of the flat and hybrid runs")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="rounds (3)")
    parser.add_argument("--configs", default=",".join(CONFIGS), metavar="LIST",
                        help="kernel,flat,hybrid")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def vmstat() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/vmstat") as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k in COUNTERS:
                out[k] = int(v)
    return out


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value + "\n")
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot set {path} to {value}: {exc.strerror} (the kernel's tiering needs root, "
            "demotion (Linux 5.15+) and NUMA balancing's tiering mode (Linux 5.18+))"
        ) from None


@contextmanager
def kernel_tiering() -> Any:
    """Demotion on and NUMA balancing in tiering mode; restored after."""
    try:
        old = (DEMOTION.read_text().strip(), BALANCING.read_text().strip())
    except OSError as exc:
        raise EnvironmentProblem(
            f"this kernel has no memory tiering controls ({exc.filename}: {exc.strerror})"
        ) from None
    try:
        with child.stop_on_signals():
            _write(DEMOTION, "true")
            _write(BALANCING, "2")
            yield
    finally:
        with suppress(OSError):
            DEMOTION.write_text(old[0] + "\n")
        with suppress(OSError):
            BALANCING.write_text(old[1] + "\n")


def _virtual() -> bool:
    with suppress(OSError), open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " hypervisor" in line for line in f)
    return False


def _one(config: str, args: argparse.Namespace, cmd: list[str]) -> dict[str, Any]:
    argv = cmd
    if config != "kernel":
        argv = [sys.executable, "-m", "hetmem", "run", "--mode", config, "--placement",
                str(args.placement), "--fast-budget", args.fast_budget, "--", *cmd]  # fmt: skip
    before = vmstat()
    t0 = time.perf_counter()
    if config == "kernel":
        with kernel_tiering():
            proc = child.run(argv)
    else:
        proc = child.run(argv)
    wall = time.perf_counter() - t0
    after = vmstat()
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["(no output)"]
        raise EnvironmentProblem(f"{config} run failed ({proc.returncode}): {tail[0]}")
    return {
        "config": config,
        "wall_s": round(wall, 6),
        "vmstat": {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS if k in after},
        "stdout_tail": proc.stdout.strip().splitlines()[-1:] or [""],
    }


def _check(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("name the command after --")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or not configs:
        raise UsageError(f"--configs: unknown {', '.join(bad) or '(none)'}; choose from "
                         f"{', '.join(CONFIGS)}")  # fmt: skip
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if not args.placement.is_file():
        raise UsageError(f"--placement {args.placement}: no such file")
    parse_budget(args.fast_budget, "--fast-budget")
    if "kernel" in configs and os.geteuid() != 0:
        raise EnvironmentProblem("the kernel config sets root's tiering controls: run as root")
    return cmd, configs


def run(args: argparse.Namespace) -> int:
    cmd, configs = _check(args)
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.repeat):
            for i in range(len(configs)):
                runs.append({"round": r, **_one(configs[(i + r) % len(configs)], args, cmd)})
    except child.Interrupted as stop:
        print(f"hetmem bench tiering: {stop}; demotion_enabled and numa_balancing "
              "restored", file=sys.stderr)  # fmt: skip
        return stop.exit_code
    result = {
        "schema_version": SCHEMA_VERSION,
        "kind": "hetmem-bench-tiering",
        "command": cmd,
        "fast_budget": parse_budget(args.fast_budget, "--fast-budget"),
        "virtual_machine": _virtual(),
        "runs": runs,
        "summary": _summary(runs, configs),
    }
    if args.json:
        output.print_json(result)
    else:
        _print(result, configs)
    return exit_status([])  # a comparison with no targets


def _summary(runs: list[dict[str, Any]], configs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in configs:
        rs = [r for r in runs if r["config"] == c]
        walls = sorted(r["wall_s"] for r in rs)
        out[c] = {
            "median_wall_s": walls[len(walls) // 2],
            "min_wall_s": walls[0],
            "max_wall_s": walls[-1],
            "vmstat": {k: sum(r["vmstat"].get(k, 0) for r in rs) for k in COUNTERS},
        }
    return out


def _print(result: dict[str, Any], configs: list[str]) -> None:
    con = output.console()
    budget = format_size(result["fast_budget"])
    con.print(f"{' '.join(result['command'])}: kernel tiering vs placement (budget {budget})")
    for c in configs:
        s = result["summary"][c]
        moved = ", ".join(f"{k} {v}" for k, v in s["vmstat"].items() if v)
        spread = f"{s['min_wall_s']:.3f}-{s['max_wall_s']:.3f}"
        con.print(f"  {c:7} median {s['median_wall_s']:.3f} s ({spread}); "
                  f"{moved or 'nothing moved'}")  # fmt: skip
    if result["virtual_machine"]:
        con.print("note: a virtual machine: its NUMA nodes may be one host memory, so read "
                  "the counters (what moved), not the times")  # fmt: skip
    else:
        con.print("vmstat: pages over all rounds of the configuration")
