# SPDX-License-Identifier: BSD-3-Clause
"""Profiles in, a placement out: the steps of `hetmem advise` between its
options and its report (expand and load the profiles, leave out the
launcher's, merge, find the tiers, solve), with the notes to show."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hetmem.placement import problem as pb
from hetmem.placement import profile as prof
from hetmem.placement.advise import Advice, advise
from hetmem.placement.limits import DEFAULT_TIME_LIMIT_S, MAX_ILP_SITES
from hetmem.placement.symbolize import Symbolizer


@dataclass
class SolveOptions:
    """The solver's knobs, as `hetmem advise` takes them."""

    ranks_per_node: int | None = None
    solver: str = "auto"
    max_ilp_sites: int = MAX_ILP_SITES
    time_limit: float = DEFAULT_TIME_LIMIT_S
    explain_top: int = 0
    split: bool = True  # fill the fast tier's room left with prefixes of large sites
    for_mode: str = "flat"  # hybrid: the pager's cache counted (cachefit.py)


@dataclass
class ProfilesAdvice:
    names: list[str]  # the profile files merged
    profiles: list[prof.Profile]
    merged: prof.Merged
    tiers: list[pb.Tier]
    advice: Advice
    notes: list[str] = field(default_factory=list)


def gather_profiles(args: list[str]) -> tuple[list[str], list[prof.Profile], list[str]]:
    """The profile files an argument list stands for, loaded, without the
    launcher's; and notes saying what was expanded or left out."""
    names: list[str] = []
    notes: list[str] = []
    for arg in args:
        files = prof.expand(arg)
        if files != [arg]:
            notes.append(
                f"{arg}: the {len(files)} per-process profile(s) of its latest run: "
                f"{', '.join(Path(f).name for f in files)}"
            )
        names += files
    profiles = [prof.load(p) for p in names]
    if any(p.rank is not None for p in profiles):
        # under an MPI launcher the ranks say so; the launcher and its
        # daemons (mpirun, orted) share no budget, whatever they allocated
        extra = [n for n, p in zip(names, profiles, strict=True) if p.rank is None]
        if extra:
            keep = [(n, p) for n, p in zip(names, profiles, strict=True) if p.rank is not None]
            names, profiles = [n for n, _ in keep], [p for _, p in keep]
            notes.append(
                f"left out {len(extra)} profile(s) of no MPI rank (the launcher and its "
                f"daemons beside the ranks): {', '.join(extra)}"
            )
    if any(p.sites for p in profiles):
        # `hetmem profile -- mpirun ...` also profiles the launcher: no
        # sites, another binary, and it is no rank sharing the budget
        empty = [n for n, p in zip(names, profiles, strict=True) if not p.sites]
        if empty:
            keep = [(n, p) for n, p in zip(names, profiles, strict=True) if p.sites]
            names, profiles = [n for n, _ in keep], [p for _, p in keep]
            notes.append(
                f"left out {len(empty)} profile(s) with no allocation site (a launcher such "
                f"as mpirun, or no allocation of at least the threshold): {', '.join(empty)}"
            )
    return names, profiles, notes


def tiers_for(
    tiers_file: str | None, storage: str | None = None, no_storage: bool = False
) -> tuple[list[pb.Tier], list[str]]:
    """The tiers from --tiers FILE, else from this machine (its storage tier
    the directory storage, when given); with notes."""
    if tiers_file:
        tiers, notes = pb.tiers_from_file(tiers_file), []
    else:
        tiers, notes = pb.tiers_from_machine(storage, no_storage)
    if len(tiers) < 2:
        notes.append(f"only one tier ({tiers[0].name}): every site goes there")
    return tiers, notes


def advise_profiles(
    profile_args: list[str],
    budget: int,
    tiers_file: str | None,
    options: SolveOptions,
    symbols: bool = True,
    storage: str | None = None,
    no_storage: bool = False,
) -> ProfilesAdvice:
    """`hetmem advise`'s work: every note in the order the command shows them."""
    names, profiles, dropped_notes = gather_profiles(profile_args)
    merged = prof.merge(profiles)
    tiers, notes = tiers_for(tiers_file, storage, no_storage)
    sym = Symbolizer() if symbols else None
    res = advise(
        merged,
        tiers,
        budget,
        ranks_per_node=options.ranks_per_node,
        solver=options.solver,
        max_ilp_sites=options.max_ilp_sites,
        time_limit=options.time_limit,
        symbolizer=sym,
        explain_top=options.explain_top,
        split=options.split,
        for_mode=options.for_mode,
        profile_names=names,
    )
    notes = dropped_notes + notes + res.notes
    if sym is not None:
        notes += [f"cannot symbolize {k}: {v}" for k, v in sym.problems.items()]
    if res.solution.note:
        notes.append(res.solution.note)
    return ProfilesAdvice(names, profiles, merged, tiers, res, notes)
