# SPDX-License-Identifier: BSD-3-Clause
"""The workflow channel from Python: versioned (key, step) objects streamed
from writer ranks to reader ranks through a memory or storage tier.

    Channel.create("run1", tier="dram", slots=2)
    with Channel.open("run1", "writer") as w:         # simulation
        w.put("temperature", step, array); w.commit(step)
    with Channel.open("run1", "reader") as r:         # analytics
        r.wait(step, timeout=10); view = r.get("temperature", step, np.float64)
        ...; r.release(step)

`get` returns a read-only numpy view of the channel's memory (zero copy),
valid until `release`; `get(..., copy=True)` returns an owned array.
Errors are NativeError subclasses carrying the library's one-line message.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import functools
import json
from typing import Any

from hetmem._native import Context, lib, strerror
from hetmem._numpy import np
from hetmem.errors import NativeError

WRITER = 1
READER = 2
_POLICIES = {"block": 0, "discard": 1}


class ChannelError(NativeError):
    """A channel call failed; errno says how."""


class StepTimeout(ChannelError):
    """wait (or a blocked put) ran out of time."""


class PeerDied(ChannelError):
    """A writer or reader process on the other side died."""


class EndOfStream(ChannelError):
    """Every writer closed before the step waited for."""


class StepGone(ChannelError):
    """The step was discarded (queue full) or already released."""


_BY_ERRNO = {
    _errno.ETIMEDOUT: StepTimeout,
    _errno.EPIPE: PeerDied,
    _errno.ENODATA: EndOfStream,
}


class _Config(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("tier", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("slots", ctypes.c_uint32),
        ("writers", ctypes.c_uint32),
        ("readers", ctypes.c_uint32),
        ("policy", ctypes.c_int),
        ("slot_bytes", ctypes.c_uint64),
        ("max_objects", ctypes.c_uint64),
        ("timeout_ms", ctypes.c_int32),
        ("replace", ctypes.c_uint32),
    ]


@functools.lru_cache(maxsize=1)
def _so() -> ctypes.CDLL:
    so = lib()
    if not hasattr(so, "hm_chan_create"):
        raise NativeError("this libhetmem has no workflow channel (rebuild hetmem)")
    for name, (args, res) in _signatures().items():
        fn = getattr(so, name)
        fn.argtypes = args
        fn.restype = res
    return so


def _signatures() -> dict[str, tuple[list[Any], Any]]:
    """argtypes and restype of each channel function of libhetmem."""
    c_p, u64, i32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int
    return {
        "hm_chan_config_default": ([ctypes.POINTER(_Config)], None),
        "hm_chan_create": ([c_p, ctypes.POINTER(_Config)], i32),
        "hm_chan_unlink": ([c_p, ctypes.c_char_p, ctypes.c_char_p], i32),
        "hm_chan_path": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t], i32),
        "hm_chan_open": (
            [c_p, ctypes.c_char_p, ctypes.c_char_p, i32, i32, ctypes.POINTER(c_p)],
            i32,
        ),
        "hm_chan_close": ([c_p], i32),
        "hm_chan_rank": ([c_p], i32),
        "hm_chan_set_timeout": ([c_p, i32], None),
        "hm_chan_put": ([c_p, ctypes.c_char_p, u64, c_p, ctypes.c_size_t], i32),
        "hm_chan_put_alloc": (
            [c_p, ctypes.c_char_p, u64, ctypes.c_size_t, ctypes.POINTER(c_p)],
            i32,
        ),
        "hm_chan_commit": ([c_p, u64], i32),
        "hm_chan_wait": ([c_p, u64, i32], i32),
        "hm_chan_latest": ([c_p, ctypes.POINTER(u64)], i32),
        "hm_chan_get": (
            [c_p, ctypes.c_char_p, u64, ctypes.POINTER(c_p), ctypes.POINTER(ctypes.c_size_t)],
            i32,
        ),
        "hm_chan_get_copy": (
            [c_p, ctypes.c_char_p, u64, c_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)],
            i32,
        ),
        "hm_chan_put_many": (
            [c_p, u64, c_p, ctypes.c_size_t, c_p, c_p, c_p, ctypes.POINTER(ctypes.c_size_t)],
            i32,
        ),
        "hm_chan_get_many": ([c_p, u64, c_p, ctypes.c_size_t, c_p, c_p], i32),
        "hm_chan_get_many_copy": (
            [c_p, u64, c_p, ctypes.c_size_t, c_p, ctypes.c_size_t, c_p],
            i32,
        ),
        "hm_chan_release": ([c_p, u64], i32),
        "hm_chan_info_json": ([c_p, ctypes.POINTER(c_p)], i32),
        "hm_chan_bench_json": (
            [
                c_p,
                ctypes.c_char_p,
                u64,
                u64,
                ctypes.c_uint32,
                ctypes.c_uint32,
                i32,
                ctypes.POINTER(c_p),
            ],
            i32,
        ),
    }


def _raise(ctx: Context, rc: int) -> None:
    cls = _BY_ERRNO.get(-rc, ChannelError)
    if -rc == _errno.ENOENT and "step" in ctx.last_error() and "gone" in ctx.last_error():
        cls = StepGone
    raise cls(ctx.last_error() or strerror(rc), rc)


def _ms(timeout: float | None) -> int:
    return -1 if timeout is None else max(0, int(timeout * 1000))


class Keys:
    """Keys packed for the batch calls (encode once, reuse every step)."""

    def __init__(self, keys: list[str]) -> None:
        for k in keys:
            if not k or "\0" in k:
                raise ChannelError(f"channel key {k!r}: 1-63 bytes, no NUL")
        self.keys = list(keys)
        self._buf = ctypes.create_string_buffer(b"".join(k.encode() + b"\0" for k in keys))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._buf)


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def path(name: str, tier: str = "dram") -> str:
    buf = ctypes.create_string_buffer(4096)
    rc = _so().hm_chan_path(tier.encode(), name.encode(), buf, len(buf))
    if rc:
        raise ChannelError(f"bad channel tier '{tier}' or name '{name}'", rc)
    return buf.value.decode()


def create(
    name: str,
    tier: str = "dram",
    *,
    slots: int = 2,
    writers: int = 1,
    readers: int = 1,
    policy: str = "block",
    slot_bytes: int = 64 << 20,
    max_objects: int = 4096,
    timeout: float | None = 30.0,
    replace: bool = False,
) -> None:
    """Creates the channel's segment; it persists until unlink()."""
    if policy not in _POLICIES:
        raise ChannelError(f"channel policy '{policy}': expected block or discard")
    so = _so()
    cfg = _Config()
    so.hm_chan_config_default(ctypes.byref(cfg))
    cfg.tier = tier.encode()
    cfg.name = name.encode()
    cfg.slots, cfg.writers, cfg.readers = slots, writers, readers
    cfg.policy = _POLICIES[policy]
    cfg.slot_bytes, cfg.max_objects = slot_bytes, max_objects
    cfg.timeout_ms = -1 if timeout is None else max(1, int(timeout * 1000))
    cfg.replace = 1 if replace else 0
    with Context() as ctx:
        rc = so.hm_chan_create(ctx.handle, ctypes.byref(cfg))
        if rc:
            _raise(ctx, rc)


def unlink(name: str, tier: str = "dram", missing_ok: bool = True) -> None:
    with Context() as ctx:
        rc = _so().hm_chan_unlink(ctx.handle, tier.encode(), name.encode())
        if rc and not (missing_ok and rc == -_errno.ENOENT):
            _raise(ctx, rc)


class Channel:
    """An open writer or reader rank of a channel."""

    def __init__(self, name: str, role: str, tier: str = "dram", rank: int = -1) -> None:
        if role not in ("writer", "reader"):
            raise ChannelError(f"channel role '{role}': expected writer or reader")
        self._so = _so()
        self._ctx = Context()
        self._h = ctypes.c_void_p()
        self.name, self.tier, self.role = name, tier, role
        rc = self._so.hm_chan_open(
            self._ctx.handle,
            tier.encode(),
            name.encode(),
            WRITER if role == "writer" else READER,
            rank,
            ctypes.byref(self._h),
        )
        if rc:
            try:
                _raise(self._ctx, rc)
            finally:
                self._ctx.close()
        self.rank: int = self._so.hm_chan_rank(self._h)
        self._ptr = ctypes.c_void_p()
        self._len = ctypes.c_size_t()

    @classmethod
    def open(cls, name: str, role: str, tier: str = "dram", rank: int = -1) -> Channel:
        return cls(name, role, tier, rank)

    def close(self) -> None:
        # detach first (see Context.close): a raising signal handler must
        # not leave a handle that __del__ closes again
        h = getattr(self, "_h", None)
        self._h = ctypes.c_void_p()
        if h:
            self._so.hm_chan_close(h)
            self._ctx.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _check(self, rc: int) -> None:
        if rc:
            _raise(self._ctx, rc)

    def set_timeout(self, timeout: float | None) -> None:
        self._so.hm_chan_set_timeout(self._h, _ms(timeout))

    # ---- writer ----
    def put(self, key: str, step: int, data: Any) -> None:
        """Copies data (a numpy array or any contiguous buffer) into step."""
        if isinstance(data, np.ndarray):
            if not data.flags.c_contiguous:
                data = np.ascontiguousarray(data)
            addr, n = data.__array_interface__["data"][0], data.nbytes
        else:
            arr = np.frombuffer(data, dtype=np.uint8)
            addr, n = (arr.__array_interface__["data"][0] if arr.size else None), arr.nbytes
        self._check(self._so.hm_chan_put(self._h, key.encode(), step, addr, n))

    # dtype defaults are names (np.dtype takes them): a default of np.uint8
    # would load numpy when this module is imported (see hetmem._numpy).
    def put_alloc(
        self, key: str, step: int, shape: int | tuple[int, ...], dtype: Any = "uint8"
    ) -> np.ndarray:
        """A writable array inside the channel to compute into (zero copy)."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape))
        nbytes = count * dt.itemsize
        self._check(
            self._so.hm_chan_put_alloc(self._h, key.encode(), step, nbytes, ctypes.byref(self._ptr))
        )
        return _view(self._ptr.value, nbytes, dt, shape, writable=True)

    def put_many(self, keys: Keys, step: int, data: np.ndarray, offsets: Any, lengths: Any) -> None:
        """Puts object i = data's bytes [offsets[i], offsets[i] + lengths[i])
        under keys[i], all in one call into the library."""
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        offs = np.ascontiguousarray(offsets, dtype=np.uint64)
        lens = np.ascontiguousarray(lengths, dtype=np.uint64)
        if not len(keys) == offs.size == lens.size:
            raise ChannelError("put_many: keys, offsets and lengths differ in length")
        if lens.size and int((offs + lens).max()) > buf.nbytes:
            raise ChannelError("put_many: an object runs past the end of data")
        done = ctypes.c_size_t()
        rc = self._so.hm_chan_put_many(
            self._h,
            step,
            keys.address,
            len(keys),
            _addr(buf) if buf.nbytes else None,
            _addr(offs),
            _addr(lens),
            ctypes.byref(done),
        )
        self._check(rc)

    def commit(self, step: int) -> None:
        self._check(self._so.hm_chan_commit(self._h, step))

    # ---- reader ----
    def wait(self, step: int, timeout: float | None = 30.0) -> None:
        self._check(self._so.hm_chan_wait(self._h, step, _ms(timeout)))

    def latest(self) -> int | None:
        out = ctypes.c_uint64()
        rc = self._so.hm_chan_latest(self._h, ctypes.byref(out))
        return None if rc else out.value

    def get(self, key: str, step: int, dtype: Any = "uint8", copy: bool = False) -> np.ndarray:
        """A read-only view of key in a held step (valid until release), or a copy."""
        self._check(
            self._so.hm_chan_get(
                self._h, key.encode(), step, ctypes.byref(self._ptr), ctypes.byref(self._len)
            )
        )
        dt = np.dtype(dtype)
        n = self._len.value
        if n % dt.itemsize:
            raise ChannelError(f"key '{key}' holds {n} bytes, not a whole number of {dt}")
        arr = _view(self._ptr.value, n, dt, n // dt.itemsize, writable=False)
        return arr.copy() if copy else arr

    def get_many(self, keys: Keys, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Addresses and lengths (uint64 arrays) of keys in a held step, in
        one call: zero copy, valid until release (see views())."""
        ptrs = np.empty(len(keys), dtype=np.uint64)
        lens = np.empty(len(keys), dtype=np.uint64)
        self._check(
            self._so.hm_chan_get_many(
                self._h, step, keys.address, len(keys), _addr(ptrs), _addr(lens)
            )
        )
        return ptrs, lens

    def views(self, keys: Keys, step: int, dtype: Any = "uint8") -> list[np.ndarray]:
        """Read-only views of keys in a held step (one library call)."""
        ptrs, lens = self.get_many(keys, step)
        dt = np.dtype(dtype)
        return [
            _view(int(p), int(n), dt, int(n) // dt.itemsize, writable=False)
            for p, n in zip(ptrs, lens, strict=True)
        ]

    def get_many_into(self, keys: Keys, step: int, out: np.ndarray) -> np.ndarray:
        """Copies keys' objects one after another into out (a contiguous
        array) in one call; returns their lengths."""
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ChannelError("get_many_into: out must be a writable contiguous array")
        lens = np.empty(len(keys), dtype=np.uint64)
        self._check(
            self._so.hm_chan_get_many_copy(
                self._h, step, keys.address, len(keys), _addr(out), out.nbytes, _addr(lens)
            )
        )
        return lens

    def release(self, step: int) -> None:
        self._check(self._so.hm_chan_release(self._h, step))

    def info(self) -> dict[str, Any]:
        out = ctypes.c_void_p()
        self._check(self._so.hm_chan_info_json(self._h, ctypes.byref(out)))
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            lib().hm_free(out)


def _view(addr: int | None, nbytes: int, dt: np.dtype, shape: Any, writable: bool) -> np.ndarray:
    if nbytes == 0 or not addr:
        return np.empty(shape, dtype=dt)
    buf = (ctypes.c_char * nbytes).from_address(addr)
    arr = np.frombuffer(buf, dtype=dt).reshape(shape)
    if not writable:
        arr.flags.writeable = False
    return arr


def bench(
    tier: str = "dram",
    objects: int = 1000,
    object_bytes: int = 4608,
    steps: int = 5,
    streams: int = 1,
    mix: bool = False,
) -> dict[str, Any]:
    """The channel's own costs measured in C (see hm_chan_bench_json)."""
    so = _so()
    with Context() as ctx:
        out = ctypes.c_void_p()
        rc = so.hm_chan_bench_json(
            ctx.handle,
            tier.encode(),
            objects,
            object_bytes,
            steps,
            streams,
            int(mix),
            ctypes.byref(out),
        )
        if rc:
            _raise(ctx, rc)
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            lib().hm_free(out)
