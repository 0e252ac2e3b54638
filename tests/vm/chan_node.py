# SPDX-License-Identifier: BSD-3-Clause
"""Run in a guest by tests/vm/guest_checks.sh: a workflow channel on tier
node:N (argv[1]), 16 MiB put by a writer and read back by a reader, then
where the kernel put the channel's pages (hetmem's own reading of this
process's numa_maps, the one `flow run --json` reports) and the mapping's
policy from the same file. Prints one JSON line:
{"tier", "ok" (data read back exactly), "policy", "pages": {"N": count}}."""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

from hetmem.flow import channel as ch
from hetmem.flow import component


def main() -> None:
    tier = sys.argv[1]
    name = f"vm-{os.getpid()}"
    ch.create(name, tier, slots=1, max_objects=4, slot_bytes=32 << 20)
    try:
        data = np.arange(2 << 20, dtype=np.float64)
        with ch.Channel.open(name, "writer", tier) as w, ch.Channel.open(name, "reader", tier) as r:
            w.put("a", 0, data)
            w.commit(0)
            r.wait(0, timeout=30)
            ok = bool(np.array_equal(r.get("a", 0, np.float64, copy=True), data))
            path = ch.path(name, tier)
            pages = component.channel_pages(path)
            with open("/proc/self/numa_maps") as f:
                line = next(x for x in f if f"file={path}" in x)
        m = re.match(r"^[0-9a-f]+ (\S+)", line)
        policy = m.group(1) if m else ""
        print(json.dumps({"tier": tier, "ok": ok, "policy": policy, "pages": pages}))
    finally:
        ch.unlink(name, tier)


if __name__ == "__main__":
    main()
