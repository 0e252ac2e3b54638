# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem flow`: in situ workflows over memory tiers (run, calibrate,
advise, sweep, bench)."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem.bench import EXIT_RULE, exit_status
from hetmem.bench.flow import add_bench_arguments, tier_arg
from hetmem.bench.flow import run as run_bench
from hetmem.errors import UsageError
from hetmem.flow import calibrate, model, runner, runoff, sweep
from hetmem.flow import spec as specmod
from hetmem.flow.spec import Spec
from hetmem.output import check_output_file
from hetmem.run import cache

SWEEP_DESCRIPTION = (
    "Runs every configuration (mode x channel tier x ranks) of each spec,\n"
    "interleaved: every round runs each configuration once, in a seeded\n"
    "shuffled order; a configuration's figure is the median of its rounds,\n"
    "its spread (max - min) / median. The best one and those whose runs\n"
    f"overlap its runs then get {sweep.DECIDE} more interleaved rounds (--decide),\n"
    "whichever the advisor chose. Before the runs `hetmem flow advise`\n"
    "predicts each one; the sweep then checks the advisor, per spec\n"
    '"advised X, measured best Y, advised is within Z% of best", and its\n'
    "target: advised within 5% of the measured best on >= 90% of the specs.\n\n"
    "Default (no SPEC): the reduced sweep, " + ", ".join(sweep.REDUCED_SPECS) + "\n"
    f"(one spec per regime), {sweep.REDUCED_REPEAT} rounds, advised once per spec: "
    "about 4 minutes\non 2 cores with its calibration. Named SPECs: the same for them.\n"
    f"--full: every shipped spec, {sweep.FULL_REPEAT} rounds, advised again before a round\n"
    "when the other load moved by more than 0.3 CPU (about 15 minutes).\n"
    "Most of the time is the advisor's own profile of each spec (printed as\n"
    '"advising"). Run it on a quiet machine: other load is noise.\n\n' + EXIT_RULE
)


class Command:
    name = "flow"
    help = "run in situ workflows through the channel; advise mode, tier and concurrency"
    description = (
        "A workflow spec (TOML) describes a writer (simulation) and a reader\n"
        "(analytics): kernels, objects per iteration, ranks, CPU binding,\n"
        "iterations. Shipped specs: " + ", ".join(specmod.shipped_names()) + ".\n\n"
        "  hetmem flow run SPEC [--mode serial|parallel] [--channel TIER] [--json]\n"
        "  hetmem flow calibrate [--tier TIER ...]      per-tier costs, cached\n"
        "  hetmem flow advise SPEC                       predicted ranking\n"
        "  hetmem flow sweep [SPEC...] [--full]          predicted vs measured\n"
        "  hetmem flow bench                             channel vs ADIOS2\n\n"
        "TIER: dram (shared memory), node:N (bound to NUMA node N),\n"
        "file:DIR (a file on a storage tier), dax:DIR (DAX/PMem filesystem),\n"
        "local:writer, local:reader (two sockets: writer and reader on two\n"
        "nodes, the channel on the writer's or the reader's; the seed's LocW\n"
        "and LocR)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
        sub.required = True
        _add_run_parser(sub)
        _add_calibrate_parser(sub)
        _add_advise_parser(sub)
        _add_sweep_parser(sub)
        p = sub.add_parser("bench", help="the channel against ADIOS2 SST and BP5")
        add_bench_arguments(p)

    def run(self, args: argparse.Namespace) -> int:
        return int(getattr(self, f"_{args.action}")(args))

    def _run(self, args: argparse.Namespace) -> int:
        res = runner.run(_run_spec(args), mode=args.mode, tier=args.channel, launcher=args.launcher)
        if args.json:
            output.print_json(res)
            return 0
        _print_run(res)
        return 0

    def _calibrate(self, args: argparse.Namespace) -> int:
        if args.max_streams < 1:
            raise UsageError("--max-streams: must be >= 1")
        con = output.err_console()
        data = calibrate.run(
            args.tier,
            args.max_streams,
            progress=None if args.json else (lambda t: con.print(f"calibrating {t} ...")),
        )
        if args.json:
            output.print_json(data)
            return 0
        _print_calibration(data)
        return 0

    def _advise(self, args: argparse.Namespace) -> int:
        spec = specmod.load(args.spec)
        if args.max_ranks < 1:
            raise UsageError("--max-ranks: must be >= 1")
        inputs: dict[str, Any] = {}
        rows = model.advise(spec, _calibration(), max_ranks=args.max_ranks, inputs=inputs)
        ref = inputs.get("parallel_ref") or {}
        if args.json:
            output.print_json(
                {"schema_version": 2, "spec": spec.name, "ranking": rows, "parallel_ref": ref}
            )
            return 0
        _print_advice(spec, rows, ref)
        return 0

    def _sweep(self, args: argparse.Namespace) -> int:
        plan, specs = _sweep_specs(args)
        t0 = time.monotonic()
        calib = calibrate.run() if args.calibrate else _calibration()
        calib_s = time.monotonic() - t0
        results = []
        with output.progress(not args.json) as prog:
            for spec in specs:
                results.append(
                    sweep.sweep(
                        spec, calib, args.max_ranks, prog, plan.repeat, plan.readvise, plan.decide
                    )
                )
        summary = sweep.summarize(results)
        summary.update(calibration_s=calib_s, wall_s=time.monotonic() - t0)
        data = {
            "schema_version": sweep.SCHEMA,
            "plan": {**asdict(plan), "specs": list(plan.specs), "max_ranks": args.max_ranks},
            "specs": results,
            "summary": summary,
        }
        if args.output:
            output.write_atomic(Path(args.output), json.dumps(data, indent=2) + "\n")
        if not args.json:
            for res in results:
                _print_sweep_spec(res)
            _print_sweep_summary(results, summary)
        else:
            output.print_json(data)
        return exit_status([summary["target"]])

    def _bench(self, args: argparse.Namespace) -> int:
        return run_bench(args)


def _run_spec(args: argparse.Namespace) -> Spec:
    """The spec of `flow run`, with --ranks applied and checked."""
    spec = specmod.load(args.spec)
    if args.ranks is not None and args.ranks < 1:
        raise UsageError("--ranks: must be >= 1")
    spec = spec.with_config(ranks=args.ranks)
    if spec.writer.objects % spec.writer.ranks:
        raise UsageError(f"--ranks {args.ranks}: {spec.writer.objects} objects do not split evenly")
    return spec


def _sweep_specs(args: argparse.Namespace) -> tuple[sweep.Plan, list[Spec]]:
    """The options of `flow sweep` checked, then every spec read, before any
    calibration or run starts."""
    plan = sweep.plan(args.spec, args.full, args.repeat, args.decide)
    if args.max_ranks < 1:
        raise UsageError("--max-ranks: must be >= 1")
    if args.output:
        check_output_file(args.output, "-o")
    return plan, [specmod.load(name) for name in plan.specs]


def _calibration() -> dict[str, Any]:
    data = calibrate.load()
    if data is None:
        output.err_console().print("no flow calibration yet: measuring now (hetmem flow calibrate)")
        data = calibrate.run()
    return data


def _cpus(cpus: list[int]) -> str:
    return ",".join(map(str, cpus)) or "any"


def _print_run(res: dict[str, Any]) -> None:
    w, r = res["writer"], res["reader"]
    output.table(
        f"flow {res['spec']}: {res['mode']}, channel {res['tier']}, "
        f"{res['ranks']['writer']}+{res['ranks']['reader']} ranks ({res['launcher']})",
        ["component", "compute s/it", "I/O s/it", "wait s/it"],
        [
            ["writer", round(w["compute"], 4), round(w["io"], 4), round(w["wait"], 4)],
            ["reader", round(r["compute"], 4), round(r["io"], 4), round(r["wait"], 4)],
        ],
    )
    if "nodes" in res:
        output.console().print(
            f"channel on {res['channel_tier']}: writer on node {res['nodes']['writer']}"
            f" (CPUs {_cpus(res['cpus']['writer'])}), reader on node {res['nodes']['reader']}"
            f" (CPUs {_cpus(res['cpus']['reader'])})"
        )
    output.console().print(
        f"{res['iterations']} iterations in {res['makespan_s']:.3f} s: "
        f"{res['iteration_s']:.4f} s per iteration; {res['objects_read']} objects read, "
        "every one from its own step"
    )


def _calibration_row(t: str, c: dict[str, Any]) -> list[Any]:
    st = c["streams"]
    # the Python batch path at 4.5 KB: the first measured point
    small = next((r for r in c.get("points", []) if r["v"] == r["n"] * 4608), None)
    return [
        t,
        round(c["c_put_ns_per_object"] + c["c_get_view_ns_per_object"], 1),
        round(small["put"] / small["n"] * 1e6, 2) if small else "",
        round(small["get"] / small["n"] * 1e6, 2) if small else "",
        " ".join(f"{k}:{v['put_gbs']:.2f}/{v['get_gbs']:.2f}" for k, v in st.items()),
        round(c["kappa"], 2),
    ]


def _print_calibration(data: dict[str, Any]) -> None:
    output.table(
        "flow calibration (per 4.5 KB object: C put + get view; Python batch put, and"
        " batch gather-get with every byte summed; GB/s put/get per stream count)",
        ["tier", "C put+get ns", "py put us", "py get+sum us", "streams GB/s", "kappa"],
        [_calibration_row(t, c) for t, c in data["tiers"].items()],
    )
    for kind, tab in data.get("concurrency", {}).items():
        output.console().print(
            f"{kind}: " + ", ".join(f"{k} at once {v:.2f}x" for k, v in tab.items())
        )
    output.console().print(f"saved to {cache.result_path(calibrate.KIND)}")


def _print_advice(spec: Spec, rows: list[dict[str, Any]], ref: dict[str, Any]) -> None:
    output.table(
        f"flow advise {spec.name}: predicted iteration time, advised first",
        ["config", "s/iter", "vs best", "runoff s/iter", "W cmp+io", "R io+cmp", "why"],
        [
            [
                r["config"],
                round(r["iteration_s"], 4),
                f"{r['predicted_slowdown']:.2f}x",
                "-" if r.get("runoff_s") is None else round(r["runoff_s"], 4),
                f"{r['writer_compute_s']:.3f}+{r['writer_io_s']:.3f}",
                f"{r['reader_io_s']:.3f}+{r['reader_compute_s']:.3f}",
                r["reason"],
            ]
            for r in rows
        ],
    )
    for p, x in sorted((ref.get("ranks") or {}).items()):
        output.console().print(
            f"parallel p{p}: scaled by {x['factor']:.2f} from a reference run on "
            f"{x['tier']} ({x['measured_s']:.4f} s/iter measured, "
            f"{x['predicted_s']:.4f} modelled)"
        )
    b = rows[0]
    ran = [r for r in rows if r.get("runoff_s") is not None]
    if len(ran) > 1:
        output.console().print(
            f"runoff: the model put {len(ran)} configurations within "
            f"{runoff.RUNOFF_WITHIN:.0%} of each other; {runoff.RUNOFF_RUNS} short runs each: "
            + ", ".join(f"{r['config']} {r['runoff_s']:.4f}" for r in ran)
            + " s/iter (medians)",
            markup=False,
            highlight=False,
        )
    nxt = rows[1] if len(rows) > 1 else None
    output.console().print(
        f"advice: --mode {b['mode']} --channel {b['tier']} --ranks {b['ranks']} "
        f"({b['reason']}; next {nxt['config']}, predicted "
        f"{nxt['iteration_s'] / b['iteration_s']:.2f}x)"
        if nxt is not None and b["iteration_s"] > 0
        else f"advice: {b['config']}",
        markup=False,
        highlight=False,
    )


def _print_sweep_spec(res: dict[str, Any]) -> None:
    more = ""
    if res.get("decided"):
        more = f", {res['decide']} more for the {len(res['decided'])} that overlapped the best"
    output.table(
        f"flow sweep {res['spec']}: median of {res['repeat']} interleaved runs{more} "
        f"(spread = (max - min) / median)",
        ["config", "predicted s/it", "measured s/it", "spread", "error", "vs best"],
        [
            [
                r["config"] + (" (advised)" if r["config"] == res["advised"] else ""),
                round(r["predicted_s"], 4),
                round(r["measured_s"], 4),
                f"{r['spread'] * 100:.0f}%",
                f"{r['error'] * 100:+.0f}%",
                f"{r['slowdown']:.3f}x",
            ]
            for r in res["rows"]
        ],
    )
    con = output.console()
    con.print(sweep.advisor_line(res), markup=False, highlight=False)
    con.print(
        f"  predictions within 20% {sum(r['within_20pct'] for r in res['rows'])}/"
        f"{len(res['rows'])}; worst choice {res['worst_slowdown']:.2f}x; median spread "
        f"{res['spread'] * 100:.0f}%; advising {res['advise_s']:.0f} s, runs "
        f"{res['runs_s']:.0f} s",
        markup=False,
        highlight=False,
    )


def _print_sweep_summary(results: list[dict[str, Any]], s: dict[str, Any]) -> None:
    con = output.console()
    for res in results:
        con.print(sweep.advisor_line(res), markup=False, highlight=False)
    con.print(sweep.target_line(s), markup=False, highlight=False)
    if s["advised_tied"]:
        con.print(f"{s['advised_tied']} of the misses are within the measurement spread")
    con.print(
        f"model (no target): predicted within 20% of measured on "
        f"{s['predictions_within_20pct']}/{s['configs']} configurations, median error "
        f"{s['median_abs_error'] * 100:.0f}%",
        markup=False,
        highlight=False,
    )
    con.print(
        f"measurement: median run-to-run spread {s['median_spread'] * 100:.0f}%; "
        f"{s['spread_over_20pct']}/{s['configs']} configurations spread over 20%",
        markup=False,
        highlight=False,
    )
    con.print(
        f"took {s['wall_s']:.0f} s: calibration {s['calibration_s']:.0f} s, advising "
        f"{sum(r['advise_s'] for r in results):.0f} s, "
        f"runs {sum(r['runs_s'] for r in results):.0f} s",
        markup=False,
        highlight=False,
    )


def _add_run_parser(sub: Any) -> None:
    """`hetmem flow run`: one spec, once."""
    p = sub.add_parser("run", help="run a workflow spec once")
    p.add_argument("spec", help="spec file, or the name of a shipped spec")
    p.add_argument("--mode", choices=specmod.MODES, help="execution mode (default: the spec's)")
    p.add_argument(
        "--channel", type=tier_arg, metavar="TIER", help="channel tier (default: the spec's)"
    )
    p.add_argument("--ranks", type=int, help="ranks per component (default: the spec's)")
    p.add_argument("--launcher", choices=("process", "mpirun"), help="how ranks start")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_calibrate_parser(sub: Any) -> None:
    """`hetmem flow calibrate`: the model's per-tier costs."""
    p = sub.add_parser("calibrate", help="measure per-tier costs for the model (cached)")
    p.add_argument("--tier", type=tier_arg, action="append", help="tier to measure (repeatable)")
    p.add_argument("--max-streams", type=int, default=2, help="concurrent streams up to N")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_advise_parser(sub: Any) -> None:
    """`hetmem flow advise`: configurations ranked by predicted time."""
    within = f"{runoff.RUNOFF_WITHIN:.0%}".replace("%", "%%")  # argparse expands %
    p = sub.add_parser(
        "advise",
        help=f"rank every configuration by predicted iteration time; near ties (within"
        f" {within}) are settled by {runoff.RUNOFF_RUNS} short runs of each",
    )
    p.add_argument("spec")
    p.add_argument("--max-ranks", type=int, default=2, help="concurrency up to N ranks")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_sweep_parser(sub: Any) -> None:
    """`hetmem flow sweep`: every configuration measured against the advisor."""
    p = sub.add_parser(
        "sweep",
        help="run every configuration: predicted against measured, and check the advisor",
        description=SWEEP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "spec",
        nargs="*",
        help="spec files or shipped spec names (default: the reduced set, "
        + ", ".join(sweep.REDUCED_SPECS)
        + ")",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="every shipped spec, 3 rounds, advised again when the load moves"
        " (about 15 minutes on 2 cores)",
    )
    p.add_argument("--max-ranks", type=int, default=2, help="concurrency up to N ranks")
    p.add_argument(
        "--repeat",
        type=int,
        help=f"runs per configuration, interleaved (median; at least {sweep.MIN_REPEAT};"
        f" default {sweep.REDUCED_REPEAT}, with --full {sweep.FULL_REPEAT})",
    )
    p.add_argument(
        "--decide",
        type=int,
        default=sweep.DECIDE,
        metavar="N",
        help="more rounds for the best configuration and those whose runs overlap"
        f" its runs (default {sweep.DECIDE}; 0: none)",
    )
    p.add_argument(
        "--calibrate", action="store_true", help="calibrate first (the machine as it is now)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "-o",
        "--output",
        help="also write the JSON to this file (the advisor's inputs included:"
        " python -m hetmem.flow.replay judges a model change against it)",
    )
