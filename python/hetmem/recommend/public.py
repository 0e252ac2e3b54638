# SPDX-License-Identifier: BSD-3-Clause
"""The public entry point of `hetmem recommend` (hetmem.recommend_mode).

Apart from hetmem.api, whose functions stay light to import: this one needs
numpy and scipy (the bootstrap intervals), loaded only when it is used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetmem.errors import UsageError
from hetmem.recommend import session as _rec_session
from hetmem.run.checks import check_storage, default_storage, resolve_command
from hetmem.sizes import parse_budget

PathLike = str | os.PathLike[str]


def recommend_mode(
    command: Sequence[str],
    fast_budget: int | str,
    *,
    storage: PathLike | None = None,
    workdir: PathLike = "hetmem-recommend",
    time_s: float = 300.0,
    rounds: int | None = None,
    modes: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Measure a command under every mode that makes sense at a fast budget
    and say which to use (what `hetmem recommend` does).

    Args:
        command: the program and its arguments; it runs several times, its
            output goes to workdir/logs.
        fast_budget: DRAM the command may use (bytes or a size such as "4G").
        storage: the storage-tier directory; None: the default one.
        workdir: folder for the placement, profile, logs and recommend.json
            (created private to this user); the command line in the answer
            refers to its placement.
        time_s: wall-clock seconds to spend; at least 2 rounds run.
        rounds: exactly this many rounds of every mode instead (1 to 10).
        modes: the modes to consider (default dram, swap, cache, flat,
            hybrid; those that cannot run here are left out with a reason).

    Returns:
        The recommendation as `hetmem recommend --json` prints it (its
        format is in docs/formats.md): "answer" holds "mode", "command",
        "vs_dram" and "vs_swap" (ratios with 95% intervals) and "why".

    Raises:
        UsageError: a bad budget, storage folder, mode or number of rounds.
        CommandNotFound, CommandNotExecutable: the command.
        NoAnswer (a HetmemError, exit code 1): no mode ran it to the end.

    Example:
        >>> r = recommend_mode(["./app"], "4G", rounds=2)  # doctest: +SKIP
        >>> r["answer"]["mode"], r["answer"]["command"]  # doctest: +SKIP
        ('cache', 'hetmem run --mode cache --fast-budget 4G ...')
    """
    budget = fast_budget if isinstance(fast_budget, int) else parse_budget(fast_budget)
    argv = [os.fspath(c) for c in command]
    resolve_command(argv, "recommend")
    store = Path(storage) if storage is not None else default_storage()
    check_storage(store, 1 << 20)
    if rounds is not None and not 1 <= rounds <= _rec_session.MAX_ROUNDS:
        raise UsageError(f"rounds must be 1 to {_rec_session.MAX_ROUNDS}, not {rounds}")
    wanted = tuple(modes) if modes is not None else _rec_session.MODES
    if not wanted or any(m not in _rec_session.MODES for m in wanted):
        raise UsageError(f"modes must be among {', '.join(_rec_session.MODES)}")
    work = Path(workdir).absolute()
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    opts = _rec_session.Options(
        argv=argv,
        budget=budget,
        storage=store.absolute(),
        workdir=work,
        budget_text=str(fast_budget),
        time_s=time_s,
        rounds=rounds,
        modes=wanted,
    )
    return _rec_session.as_dict(_rec_session.recommend(opts))
