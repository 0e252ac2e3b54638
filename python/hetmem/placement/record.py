# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem profile -- CMD`: the command run under the interposer in profiling
mode, its per-process profiles published under their final names."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hetmem.errors import EnvironmentProblem, HetmemError, UsageError
from hetmem.output import check_output_dir
from hetmem.placement import profile as prof
from hetmem.run.checks import check_threshold, warn_if_not_interposable
from hetmem.run.config import preload_path
from hetmem.run.proc import _Interrupted, _signals, _spawn
from hetmem.run.report import static_label
from hetmem.sizes import format_size

SAMPLERS = ("auto", "pebs", "ibs", "spe", "damon", "refs", "portable", "none")
# the samplers that need something of this machine: checked before the run
PRECISE = ("pebs", "ibs", "spe", "damon", "refs")


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


def samples_note(p: prof.Profile) -> str | None:
    """What a user should hear about a profile's access samples: none at
    all (advise then has nothing to rank by), or few intervals of the refs
    sampler (whose interval stretches with the memory the program touches)."""
    samp = p.header.get("sampler") or {}
    name = samp.get("name")
    if not p.sites or name in (None, "none"):
        return None
    if not any(s.loads + s.stores + s.first for s in p.sites):
        return (
            f"{name} sampler recorded no access to the {len(p.sites)} site(s): the run was "
            "too short for it; advise would leave every site on the slowest tier"
        )
    periods = samp.get("periods")
    if name == "portable" and isinstance(periods, int) and periods < prof.FEW_INTERVALS:
        return _portable_periods_note(p, periods, float(samp.get("interval_us") or 0) / 1000)
    drains = samp.get("drains")
    if name == "refs" and isinstance(drains, int) and drains < prof.FEW_INTERVALS:
        iv = float(samp.get("interval_mean_us") or 0) / 1000
        return (
            f"the refs sampler saw {drains} interval(s) of {iv:.0f} ms on average (it "
            "stretches them to keep its cost near 3%): a longer run ranks sites better"
        )
    return None


def _portable_periods_note(p: prof.Profile, periods: int, period_ms: float) -> str:
    """The portable sampler counts a page once per period however often it
    is touched: over a few periods a site swept 48 times ranks like one
    swept once (tests/vm/test_vm.py met it: 5 periods, a cold array put in
    DRAM). The period to suggest gives about 32 of them over the run."""
    wall_ms = float(p.header.get("wall_ns") or 0) / 1e6
    suggest = max(0.1, wall_ms / (4 * prof.FEW_INTERVALS))
    return (
        f"the portable sampler saw {periods} period(s) of {period_ms:g} ms in a "
        f"{wall_ms:.0f} ms run (a page counts once per period however often it is touched): "
        f"--period {suggest:.1g}ms or a longer run ranks sites better"
    )


# below the threshold, this much memory in allocations of at least a quarter
# of it is worth a hint (bytes allocated: small blocks' frees are not seen)
NEAR_HINT_BYTES = 32 << 20


def threshold_note(p: prof.Profile) -> str | None:
    """A hint when allocations just under the threshold (a code's 0.5-1 MB
    persistent arrays under the 1 MiB default) add up to much memory: they
    are not sites, so no placement can move them."""
    near = (p.header.get("small") or {}).get("near_threshold")
    thr = p.header.get("threshold")
    if not isinstance(near, dict) or not isinstance(thr, int) or thr <= 0:
        return None
    nbytes, count, low = near.get("bytes", 0), near.get("count", 0), near.get("from", thr // 4)
    if not isinstance(nbytes, int) or nbytes < NEAR_HINT_BYTES:
        return None
    return (
        f"{count} allocation(s) of {format_size(low)} to {format_size(thr)} ({format_size(nbytes)} "
        f"in all) were below the threshold and are not sites; --threshold "
        f"{format_size(low).replace(' ', '')} profiles them"
    )


def statics_notes(p: prof.Profile) -> list[str]:
    """Large static data the profile could not make a site of (.data, or
    .bss written before main): it cannot rank them, and a user whose arrays
    are all static would otherwise see 0 sites and no reason. Static arrays
    that are sites need no note: they are in the table."""
    out = []
    for st in p.header.get("statics") or ():
        if not st.get("why"):
            continue
        out.append(
            f"{static_label(st)} ({format_size(int(st.get('bytes', 0)))}) is not profiled: "
            f"{st['why']}"
        )
    return out


def _note_samples(files: list[str]) -> None:
    for f in files:
        try:
            p = prof.load(f)
        except HetmemError:
            continue
        for note in (samples_note(p), threshold_note(p), *statics_notes(p)):
            if note:
                os.write(2, f"hetmem profile: note: {os.path.basename(f)}: {note}\n".encode())


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
    check_threshold(threshold)
    if sampler not in SAMPLERS:
        raise UsageError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if not 0 < period_ms <= 3_600_000:  # also refuses nan and inf
        raise UsageError(f"--period must be more than 0 and at most an hour, not {period_ms:g} ms")
    warn_if_not_interposable(argv, "profile")
    so = preload_path()
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
    env["HETMEM_SAMPLE_PERIOD"] = f"{max(100, int(period_ms * 1000))}us"
    for k in ("HETMEM_PLACEMENT", "HETMEM_STATS"):
        env.pop(k, None)
    if sampler in PRECISE:
        check_sampler(env, sampler)
    state: dict[str, Any] = {}
    try:
        with _signals(state):
            rc, _ = _spawn(argv, env, state)
    except _Interrupted as exc:
        prof.publish(template, token)
        os.write(2, f"hetmem profile: interrupted by signal {exc.signum}\n".encode())
        return 128 + exc.signum
    files = prof.publish(template, token)
    for f in files:
        os.write(2, f"hetmem profile: wrote {f}{_overhead_of(f)}\n".encode())
    _note_interpreters(files)
    _note_samples(files)
    if not files:
        os.write(
            2,
            b"hetmem profile: note: no profile was written (the command made no "
            b"process that exited normally under the interposer)\n",
        )
    return rc
