"""The analytical model behind `hetmem flow advise` (see
../shared/notes/anchors-workflow.md section 5, adapted to ranks that share
CPUs). Per iteration, for one configuration (mode, tier, ranks p):

  writer rank:  Cw(p) compute + Ww = (n/p) o_put + (V/p) b_put s(p)
  reader rank:  Rr = (n/p) o_get + (V/p) b_get s(p)  +  A(p) analytics
  s(p) = p B(1) / B(p): per-stream slowdown when p streams share the tier.
  f(k) = max(1, k / cores): CPU oversubscription with k busy ranks.

  serial:   T = (Cw + Ww) f(p) + (Rr + A) f(p)          (phases interleave)
  parallel: P = max(Cw + Ww (1 + kappa w_w), Rr (1 + kappa w_r) + A,
                    p (Cw + Ww + Rr + A) / cores)        (pipelined)
            with w the chance the other side streams at the same time
            (its I/O time over the period), solved by fixed point;
            T = ((iters - 1) P + Pw + Pr) / iters     (fill and drain)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetmem.flow import kernels
from hetmem.flow.spec import Spec


@dataclass
class Config:
    mode: str
    tier: str
    ranks: int

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.tier}/p{self.ranks}"


def configurations(tiers: list[str], max_ranks: int = 2) -> list[Config]:
    return [
        Config(m, t, p)
        for m in ("serial", "parallel")
        for t in tiers
        for p in range(1, max_ranks + 1)
    ]


def kernel_times(spec: Spec, ranks: list[int]) -> dict[str, dict[int, float]]:
    """A light profile: one rank's kernel time for each rank count."""
    out: dict[str, dict[int, float]] = {"writer": {}, "reader": {}}
    for role in ("writer", "reader"):
        c = getattr(spec, role)
        rep = c.repeat
        if c.kernel != "none" and c.seconds > 0:
            rep = kernels.repeat_for_seconds(c.kernel, c.size, c.seconds)
        for p in ranks:
            out[role][p] = kernels.seconds_per_run(c.kernel, c.size, rep, p, spec.step_bytes // p)
    return out


def _stream_slowdown(tc: dict[str, Any], p: int, key: str) -> float:
    st = tc.get("streams", {})
    one = st.get("1", {}).get(key)
    many = st.get(str(p), {}).get(key)
    if not one or not many or p <= 1:
        return 1.0
    return max(1.0, p * one / many)


def predict(
    spec: Spec, calib: dict[str, Any], ktimes: dict[str, dict[int, float]], cfg: Config
) -> dict[str, Any]:
    tc = calib["tiers"].get(cfg.tier)
    if tc is None:
        raise KeyError(cfg.tier)
    cores = max(1, int(calib.get("cores", 1)))
    p = cfg.ranks
    n, size = spec.writer.objects, spec.writer.object_bytes
    v = n * size
    cw = ktimes["writer"][p]
    a = ktimes["reader"][p]
    ww_obj = n / p * tc["put_object_s"]
    ww_byte = v / p * tc["put_byte_s"] * _stream_slowdown(tc, p, "put_gbs")
    rr_obj = n / p * tc["get_object_s"]
    rr_byte = v / p * tc["get_byte_s"] * _stream_slowdown(tc, p, "get_gbs")
    ww, rr = ww_obj + ww_byte, rr_obj + rr_byte
    f = max(1.0, p / cores)
    pw, pr = (cw + ww) * f, (rr + a) * f
    if cfg.mode == "serial":
        period = pw + pr
        total = spec.iterations * period
        reason = "interleaved: no contention"
    else:
        kappa = float(tc.get("kappa", 0.0))
        cpu_bound = p * (cw + ww + rr + a) / cores
        period = max(pw, pr)
        for _ in range(4):
            w_w = min(1.0, rr_byte / period) if period > 0 else 0.0
            w_r = min(1.0, ww_byte / period) if period > 0 else 0.0
            side_w = cw + ww_obj + ww_byte * (1 + kappa * w_w)
            side_r = rr_obj + rr_byte * (1 + kappa * w_r) + a
            period = max(side_w * f, side_r * f, cpu_bound)
        total = (spec.iterations - 1) * period + pw + pr
        if cpu_bound >= max(side_w, side_r) * f:
            reason = f"CPU-bound ({2 * p} ranks, {cores} cores)"
        elif side_w >= side_r:
            reason = "writer binds, reader hidden"
        else:
            reason = "reader binds, writer hidden"
    return {
        "config": cfg.label,
        "mode": cfg.mode,
        "tier": cfg.tier,
        "ranks": p,
        "iteration_s": total / spec.iterations,
        "writer_compute_s": cw,
        "writer_io_s": ww,
        "reader_io_s": rr,
        "reader_compute_s": a,
        "reason": reason,
    }


def advise(
    spec: Spec, calib: dict[str, Any], tiers: list[str] | None = None, max_ranks: int = 2
) -> list[dict[str, Any]]:
    """Every configuration's predicted iteration time, best first."""
    tiers = tiers or list(calib["tiers"])
    missing = [t for t in tiers if t not in calib["tiers"]]
    if missing:
        from hetmem.errors import UsageError

        raise UsageError(
            f"tier {missing[0]} is not calibrated; run `hetmem flow calibrate --tier {missing[0]}`"
        )
    ranks = list(range(1, max_ranks + 1))
    kt = kernel_times(spec, ranks)
    rows = [predict(spec, calib, kt, c) for c in configurations(tiers, max_ranks)]
    rows.sort(key=lambda r: r["iteration_s"])
    best = rows[0]["iteration_s"]
    for r in rows:
        r["predicted_slowdown"] = r["iteration_s"] / best if best > 0 else 1.0
    return rows
