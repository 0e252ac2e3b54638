# SPDX-License-Identifier: BSD-3-Clause
"""Judges a change to the advisor's model offline: takes the JSON that
`hetmem flow sweep --json` wrote (its measurements, and under
"advisor_inputs" what every advise round predicted from) and makes the
predictions again with the model as it is now, optionally without one of
its refinements, then scores them as the sweep does (sweep.summarize):

  python -m hetmem.flow.replay SWEEP.json [--calibration CAL.json]
      [--without mix_now|overlap|cpu|concurrency_now]... [-v]

The measurements are not touched: only the predictions, and so the advised
configuration, change. Where the sweep recorded a runoff (flow/runoff.py),
its runs decide again between the contenders of the replayed predictions
that it ran; --without runoff replays the choice by prediction alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hetmem.flow import calibrate, model, runoff, sweep
from hetmem.flow import spec as specmod

PARTS = ("mix_now", "overlap", "cpu", "concurrency_now", "parallel_ref", "runoff")
IO_PARTS = ("overlap", "cpu")  # kept per tier and rank count in the I/O profile


def _strip(inputs: dict[str, Any], without: tuple[str, ...]) -> dict[str, Any]:
    out = dict(inputs)
    for part in without:
        if part in IO_PARTS:
            out["io"] = {
                k: {a: b for a, b in v.items() if a != part}
                for k, v in (out.get("io") or {}).items()
            }
        else:
            out[part] = None
    return out


def evaluate(
    data: dict[str, Any], calib: dict[str, Any], without: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sweep's per-spec results with replayed predictions, and their summary."""
    results = []
    for res in data["specs"]:
        spec = specmod.load(res["spec"])
        rows = [dict(r) for r in res["rows"]]
        labels = [r["config"] for r in rows]
        inputs = res.get("advisor_inputs") or []
        if not inputs:
            raise ValueError(f"{res['spec']}: the sweep recorded no advisor inputs")
        rounds = res.get("round_inputs") or [0]
        made = {
            i: model.replay(spec, calib, _strip(inputs[i], without), labels) for i in set(rounds)
        }
        for r in rows:
            sweep.set_prediction(r, [made[i][r["config"]] for i in rounds])
        picks = [runoff.pick(made[i], _strip(inputs[i], without).get("runoff")) for i in rounds]
        tied = res.get("tied_with_best", [])
        advised = sweep.advised_fields(rows, tied, sweep.advised_of(picks))
        results.append(dict(res, rows=rows, **advised))
    return results, sweep.summarize(results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetmem.flow.replay")
    p.add_argument("sweep", help="JSON written by `hetmem flow sweep --json`")
    p.add_argument("--calibration", help="flow calibration JSON (default: the cached one)")
    p.add_argument("--without", action="append", choices=PARTS, default=[])
    p.add_argument("-v", action="store_true", help="every configuration")
    args = p.parse_args(argv)
    with open(args.sweep) as f:
        data = json.load(f)
    if args.calibration:
        with open(args.calibration) as f:
            calib = json.load(f)
    else:
        calib = calibrate.load()
        if calib is None:
            sys.stderr.write("no flow calibration cached: give --calibration\n")
            return 2
    results, summ = evaluate(data, calib, tuple(args.without))
    for res in results:
        print(f"{res['spec']:18s} advised {res['advised']:28s} {res['advised_slowdown']:.3f}x")
        if args.v:
            for r in res["rows"]:
                print(
                    f"    {r['config']:28s} measured {r['measured_s']:.4f}"
                    f" predicted {r['predicted_s']:.4f} ({r['error']:+.2f})"
                )
    print(
        f"advised within 5% of the best: {summ['advised_within_5pct']}/{summ['specs']}; "
        f"predictions within 20%: {summ['predictions_within_20pct']}/{summ['configs']} "
        f"(median error {summ['median_abs_error'] * 100:.1f}%)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
