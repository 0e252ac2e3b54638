"""`hetmem profile`: record allocation sites of a command, or show a profile."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem.errors import EnvironmentProblem, HetmemError, UsageError
from hetmem.output import check_output_dir
from hetmem.placement import profile as prof
from hetmem.placement.sitenames import distinct_labels, first_user_frame, frame_text, short
from hetmem.placement.symbolize import Symbolizer
from hetmem.run import launch as hrun
from hetmem.sizes import format_size, parse_size


def frame_inputs(
    sites: list[prof.Site], depth: int | None = None
) -> list[tuple[str, str, str, int]]:
    out = []
    for s in sites:
        for m, off in s.frames[:depth]:
            out.append((m.key, m.path, m.build_id, off))
    return out


def describe_frames(sym: Symbolizer, site: prof.Site, depth: int | None = None) -> list[str]:
    """Each frame as 'function at file:line (module+0xoffset)' or
    'module+0xoffset'."""
    out = []
    for m, off in site.frames[:depth]:
        loc = sym.lookup(m.key, m.path, m.build_id, off)
        known = loc is not None and bool(loc.function or loc.file)
        out.append(frame_text(m.path, off, str(loc) if known else None))
    return out


def user_frame(site: prof.Site) -> int:
    """The index of the site's innermost frame outside the language runtimes
    (0 when every frame is in one)."""
    return first_user_frame([m.path for m, _ in site.frames])


def site_rows(p: prof.Profile, sym: Symbolizer) -> list[dict[str, Any]]:
    sym.prefetch(frame_inputs(p.sites))
    rows = []
    for i, s in enumerate(p.sites):
        k = user_frame(s)
        m, off = s.frames[k]
        loc = sym.lookup(m.key, m.path, m.build_id, off)
        rows.append(
            {
                "index": i,
                "user_frame": k,
                "function": loc.function if loc else None,
                "file": loc.file if loc else None,
                "line": loc.line if loc else 0,
                "frames": [
                    {"module": m.path, "build_id": m.build_id, "offset": off} for m, off in s.frames
                ],
                "symbols": describe_frames(sym, s),
                "allocs": s.allocs,
                "bytes": s.bytes,
                "max_bytes": s.max_bytes,
                "peak_live_bytes": s.peak_live_bytes,
                "lifetime_ns": {
                    "min": s.lifetime_min_ns,
                    "mean": s.lifetime_mean_ns,
                    "max": s.lifetime_max_ns,
                },
                "never_freed": s.never_freed,
                "samples": {"loads": s.loads, "stores": s.stores},
                "est_accesses": s.est_accesses,
                "accesses_per_byte": s.accesses_per_byte,
                "random_fraction": s.random_fraction,
                "small": {"count": s.small_count, "bytes": s.small_bytes},
            }
        )
    for r, label in zip(
        rows,
        distinct_labels([r["symbols"] for r in rows], [r["user_frame"] for r in rows]),
        strict=True,
    ):
        r["label"] = label
    rows.sort(key=lambda r: -r["est_accesses"])
    return rows


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return f"signal {sig}"


def _ns(ns: float) -> str:
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns:.0f} ns"


class Command:
    name = "profile"
    help = "record which allocation sites a command uses and how hot they are; show a profile"
    description = (
        "hetmem profile [-o FILE] -- CMD ARGS...   records every allocation site of CMD\n"
        "  (call stack as module build-id + offset, sizes, lifetimes, live bytes over\n"
        "  time, sampled accesses), one profile per process / MPI rank.\n"
        "hetmem profile show FILE [--json]          lists the sites of a profile with\n"
        "  source file:line and function (from DWARF), bytes, peak live bytes,\n"
        "  lifetime and estimated accesses per byte, hottest first.\n"
        "The file format is documented in docs/formats.md."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            default="hetmem.prof",
            help="profile file name template: %%h host, %%r MPI rank ('norank' outside MPI), "
            "%%p pid; '.%%r.%%p' is appended when it has no %%p (default hetmem.prof)",
        )
        parser.add_argument(
            "--sampler",
            default="auto",
            choices=SAMPLERS,
            help="access sampler: auto (default: the first of pebs, ibs, spe, damon that "
            "works here, else portable), pebs (Intel PEBS mem-loads/mem-stores), ibs (AMD IBS "
            "op), spe (Arm SPE), damon (DAMON vaddr monitoring, needs root), portable "
            "(page-protection sampling), none; a named one this machine lacks is an error",
        )
        parser.add_argument(
            "--depth", type=int, default=8, metavar="N", help="frames per site, 1..64 (8)"
        )
        parser.add_argument(
            "--threshold",
            metavar="SIZE",
            default="1MiB",
            help="allocations of at least SIZE are recorded one by one; smaller ones are "
            "counted per caller (default 1MiB, as hetmem run)",
        )
        parser.add_argument(
            "--period",
            type=float,
            default=10.0,
            metavar="MS",
            help="access sampler period in milliseconds (default 10)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON (show)")
        parser.add_argument(
            "--top", type=int, default=0, metavar="N", help="show only the N hottest sites"
        )
        parser.add_argument(
            "argv",
            nargs=argparse.REMAINDER,
            metavar="show FILE | -- CMD ARGS",
            help="`show FILE`, or `--` and the command to profile",
        )

    def run(self, args: argparse.Namespace) -> int:
        argv = list(args.argv)
        if argv and argv[0] == "show":
            rest = [a for a in argv[1:] if a != "--json"]
            as_json = args.json or "--json" in argv[1:]
            if len(rest) != 1:
                raise UsageError("usage: hetmem profile show FILE [--json]")
            return self.show(rest[0], as_json, args.top)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise UsageError(
                "give a command to profile (hetmem profile -- CMD ARGS) or `show FILE`"
            )
        return record(
            argv,
            args.output,
            args.depth,
            parse_size(args.threshold, "--threshold"),
            args.sampler,
            args.period,
        )

    def show(self, path: str, as_json: bool, top: int) -> int:
        loaded = {f: prof.load(f) for f in prof.expand(path)}
        if len(loaded) > 1:
            # a launcher's profile has no site: with one rank, show the rank
            loaded = {f: p for f, p in loaded.items() if p.sites} or loaded
        if len(loaded) > 1:
            raise UsageError(
                f"{path} stands for {len(loaded)} per-process profiles of one run: "
                f"{', '.join(loaded)}; show one of them"
            )
        ((path, p),) = loaded.items()
        sym = Symbolizer()
        rows = site_rows(p, sym)
        if top > 0:
            rows = rows[:top]
        if as_json:
            output.print_json(
                {
                    "schema_version": 1,
                    "profile": path,
                    "header": p.header,
                    "modules": [{"path": m.path, "build_id": m.build_id} for m in p.modules],
                    "sites": rows,
                    "symbolization_problems": sym.problems,
                }
            )
            return 0
        h = p.header
        rank = "" if h.get("rank") is None else f", rank {h['rank']}"
        output.console().print(
            f"{path}: {p.binary.path} (pid {h['pid']}{rank} on {h['hostname'] or '?'}), "
            f"{len(p.sites)} sites, wall {_ns(h['wall_ns'])}, sampler {h['sampler']['name']} "
            f"({h['sampler']['period']:g} accesses per sample"
            # the portable sampler's rounds; a precise sampler's interval only drains buffers
            + (
                f", every {iv / 1000:g} ms"
                if h["sampler"]["name"] == "portable" and (iv := h["sampler"].get("interval_us"))
                else ""
            )
            + (f", estimated overhead {ov[1]:.1%})" if (ov := prof.sampler_overhead(h)) else ")"),
            markup=False,
        )
        if h.get("stopped_by_signal"):
            output.console().print(
                f"note: the run was stopped by {_signame(h['stopped_by_signal'])}: the profile "
                "covers it up to then",
                markup=False,
            )
        for key, msg in sym.problems.items():
            output.err_console().print(f"warning: cannot symbolize {key}: {msg}", markup=False)
        output.table(
            "allocation sites, hottest first",
            [
                "#",
                "site",
                "allocs",
                "bytes",
                "peak live",
                "lifetime (mean)",
                "est. accesses",
                "acc/byte",
            ],
            [
                [
                    r["index"],
                    short(r["label"]),
                    r["allocs"],
                    format_size(r["bytes"]),
                    format_size(r["peak_live_bytes"]),
                    _ns(r["lifetime_ns"]["mean"]),
                    f"{r['est_accesses']:.3g}",
                    f"{r['accesses_per_byte']:.3g}",
                ]
                for r in rows
            ],
        )
        return 0


SAMPLERS = ("auto", "pebs", "ibs", "spe", "damon", "portable", "none")
PRECISE = ("pebs", "ibs", "spe", "damon")


def check_sampler(env: dict[str, str], sampler: str) -> None:
    """A named precise sampler must work here before the command runs: the
    interposer's own selection (src/preload/sampler.c) is run once on
    `true`, and its one-line refusal becomes this command's error (exit 2)."""
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="hetmem-sampler-") as tmp:
        probe_env = dict(env)
        probe_env["HETMEM_PROFILE"] = os.path.join(tmp, "probe.%p")
        proc = subprocess.run(
            [true], env=probe_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        msg = lines[-1] if lines else f"exit status {proc.returncode}"
        msg = msg.removeprefix("hetmem: cannot start profile mode: ")
        msg = msg.removeprefix(f"sampler '{sampler}' is not available here: ")
        raise EnvironmentProblem(f"--sampler {sampler} is not available here: {msg}")


def _overhead_of(path: str) -> str:
    """' (sampler X, estimated overhead Y% of the run)' from a profile's
    header, or '' when it has none (no sampler, unreadable)."""
    ov = prof.sampler_overhead(prof.read_header(path))
    return f" (sampler {ov[0]}, estimated overhead {ov[1]:.1%} of the run)" if ov else ""


_INTERPRETER = re.compile(r"^(python|pypy|julia|R$|Rscript|node|ruby|perl)")


def _note_interpreters(files: list[str]) -> None:
    """Sites are C call stacks: an interpreter makes every array from the
    same frames, which a user should hear before trusting a placement."""
    for f in files:
        try:
            p = prof.load(f)
        except HetmemError:
            continue
        name = Path(p.binary.path).name
        if _INTERPRETER.match(name) and p.sites:
            os.write(
                2,
                f"hetmem profile: note: {name} is an interpreter: its allocations are told "
                "apart by C call stacks only, so arrays made by different lines of the "
                "script share a site (flat/hybrid cannot place them apart; cache mode can "
                "run it)\n".encode(),
            )
            return


def record(
    argv: list[str], output: str, depth: int, threshold: int, sampler: str, period_ms: float
) -> int:
    """Runs argv under the interposer in profiling mode; returns its exit status."""
    if not 1 <= depth <= 64:
        raise UsageError("--depth must be 1..64")
    if threshold < os.sysconf("SC_PAGE_SIZE"):
        raise UsageError("--threshold must be at least one page")
    if sampler not in SAMPLERS:
        raise UsageError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if not 0 < period_ms <= 3_600_000:  # also refuses nan and inf
        raise UsageError(
            f"--period must be a number of milliseconds in (0, 3600000], not {period_ms}"
        )
    hrun.warn_if_not_interposable(argv, "profile")
    so = hrun.preload_path()
    if not so.exists():
        raise EnvironmentProblem(f"{so} is missing: reinstall hetmem")
    template = str(Path(prof.output_template(output)).absolute())
    check_output_dir(template, "-o")
    token = secrets.token_hex(8)
    env = dict(os.environ)
    env["LD_PRELOAD"] = str(so) + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["HETMEM_PROFILE"] = prof.run_template(template, token)
    env["HETMEM_PROFILE_DEPTH"] = str(depth)
    env["HETMEM_ALLOC_THRESHOLD"] = str(threshold)
    env["HETMEM_SAMPLER"] = sampler
    env["HETMEM_SAMPLE_PERIOD"] = str(max(100, int(period_ms * 1000)))
    for k in ("HETMEM_PLACEMENT", "HETMEM_STATS"):
        env.pop(k, None)
    if sampler in PRECISE:
        check_sampler(env, sampler)
    state: dict[str, Any] = {}
    try:
        with hrun._signals(state):
            rc, _ = hrun._spawn(argv, env, state)
    except hrun._Interrupted as exc:
        prof.publish(template, token)
        os.write(2, f"hetmem profile: interrupted by signal {exc.signum}\n".encode())
        return 128 + exc.signum
    files = prof.publish(template, token)
    for f in files:
        os.write(2, f"hetmem profile: wrote {f}{_overhead_of(f)}\n".encode())
    _note_interpreters(files)
    if not files:
        os.write(
            2,
            b"hetmem profile: note: no profile was written (the command made no "
            b"process that exited normally under the interposer)\n",
        )
    return rc
