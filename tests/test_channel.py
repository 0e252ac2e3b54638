"""The workflow channel's Python binding: numpy views, errors, two processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from hetmem import channel as ch
from hetmem.errors import NativeError


@pytest.fixture
def name():
    n = f"pyt-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    ch.unlink(n)


def test_roundtrip_views_and_copies(name):
    ch.create(name, slots=2, max_objects=64, slot_bytes=1 << 20)
    with ch.Channel.open(name, "writer") as w, ch.Channel.open(name, "reader") as r:
        a = np.linspace(0.0, 1.0, 1000)
        w.put("a", 0, a)
        w.put("raw", 0, b"hello")
        w.put("strided", 0, np.arange(20, dtype=np.int32)[::2])
        z = w.put_alloc("z", 0, (4, 5), np.float32)
        z[:] = np.arange(20, dtype=np.float32).reshape(4, 5)
        with pytest.raises(ch.StepTimeout):
            r.wait(0, timeout=0)
        w.commit(0)
        r.wait(0, timeout=5)
        view = r.get("a", 0, np.float64)
        assert np.array_equal(view, a)
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[0] = 5.0
        assert r.get("raw", 0).tobytes() == b"hello"
        assert list(r.get("strided", 0, np.int32)) == list(range(0, 20, 2))
        assert np.array_equal(r.get("z", 0, np.float32), np.arange(20, dtype=np.float32))
        owned = r.get("a", 0, np.float64, copy=True)
        assert owned.flags.owndata and owned.flags.writeable
        with pytest.raises(ch.ChannelError, match="not in step"):
            r.get("missing", 0)
        with pytest.raises(ch.ChannelError, match="whole number"):
            r.get("raw", 0, np.float64)
        assert r.latest() == 0
        info = r.info()
        assert info["committed"] == 1 and info["steps"][0]["objects"] == 4
        r.release(0)
        assert r.latest() is None
        with pytest.raises(ch.StepGone):
            r.wait(0, timeout=0)
        w.close()
        with pytest.raises(ch.EndOfStream):
            r.wait(1, timeout=5)


def test_bad_input_is_one_line_error(name):
    with pytest.raises(NativeError, match="tier 'tape'"):
        ch.create(name, tier="tape")
    with pytest.raises(ch.ChannelError, match="policy"):
        ch.create(name, policy="sometimes")
    with pytest.raises(ch.ChannelError, match="no such channel"):
        ch.Channel.open(name, "reader")
    ch.create(name)
    with pytest.raises(ch.ChannelError, match="exists"):
        ch.create(name)
    with pytest.raises(ch.ChannelError, match="role"):
        ch.Channel.open(name, "viewer")


_WRITER = textwrap.dedent(
    """
    import sys, time, numpy as np
    from hetmem import channel as ch
    name, steps, die = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "die"
    w = ch.Channel.open(name, "writer")
    w.set_timeout(30)
    for s in range(steps):
        for i in range(10):
            w.put(f"o{i}", s, np.full(512, s * 100 + i, dtype=np.int64))
        w.commit(s)
    if die:
        w.put("half", steps, np.zeros(8))
        print("ready", flush=True)
        time.sleep(60)
    w.close()
    """
)


def _spawn_writer(name: str, steps: int, die: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, name, str(steps), "die" if die else "ok"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def test_two_processes_stream_every_step(name):
    ch.create(name, slots=2, max_objects=16, slot_bytes=1 << 20)
    proc = _spawn_writer(name, 8, die=False)
    try:
        got = 0
        with ch.Channel.open(name, "reader") as r:
            step = 0
            while True:
                try:
                    r.wait(step, timeout=30)
                except ch.EndOfStream:
                    break
                for i in range(10):
                    v = r.get(f"o{i}", step, np.int64)
                    assert v.shape == (512,) and (v == step * 100 + i).all()
                r.release(step)
                got += 1
                step += 1
        assert got == 8
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_dead_writer_is_reported(name):
    ch.create(name, slots=2, max_objects=16, slot_bytes=1 << 20)
    proc = _spawn_writer(name, 1, die=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with ch.Channel.open(name, "reader") as r:
            r.wait(0, timeout=5)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            with pytest.raises(ch.PeerDied, match="died"):
                r.wait(1, timeout=30)
            assert (r.get("o3", 0, np.int64) == 3).all()  # committed step still readable
    finally:
        proc.kill()
        proc.wait()


def test_bench_reports_consistent_figures():
    res = ch.bench("dram", objects=200, object_bytes=4608, steps=3, streams=1)
    assert res["objects"] == 200 and res["object_bytes"] == 4608
    for k in ("put_ns_per_object", "get_view_ns_per_object", "memcpy_ns_per_object"):
        assert res[k] > 0
    # a copy out of the channel moves the object's bytes, so it cannot be
    # cheaper than looking up its view
    assert res["get_copy_ns_per_object"] >= res["get_view_ns_per_object"] * 0.5
    mixed = ch.bench("dram", objects=50, object_bytes=65536, steps=4, streams=2, mix=True)
    assert mixed["streams"] == 2 and mixed["mix"] is True
    assert not [
        f for f in os.listdir("/dev/shm") if f.startswith(f"hetmem-chan-bench-{os.getpid()}")
    ]
