# SPDX-License-Identifier: BSD-3-Clause
"""The interposer's output files in directories other users can write
(issue 19, findings 2 and 3).

The profile used to be written to a predictable `<out>.tmp<pid>` opened with
O_CREAT|O_TRUNC: a symbolic link planted there by another user made root's
run overwrite the link's target, and the rename then left the final profile
a symbolic link. HETMEM_STATS appended through a symbolic link the same way.
These tests plant the links as a real attacker would (as `nobody` when the
suite runs as root, in a directory that user may write) and check that
nothing is written through them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CBUILD
from hetmem import _native

TARGET = CBUILD / "hm_preload_target"
PRELOAD = _native.library_dir() / "libhetmem_preload.so"
IS_ROOT = os.geteuid() == 0
NOBODY = 65534
VICTIM_TEXT = "precious data that no hetmem run may touch\n"

pytestmark = pytest.mark.skipif(
    not TARGET.exists() or not PRELOAD.exists(), reason="interposer or its target not built"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    env["LD_PRELOAD"] = str(PRELOAD)
    env.update(extra)
    return env


def _as_attacker() -> None:  # runs in the attacker's child before exec
    if IS_ROOT:
        os.setgid(NOBODY)
        os.setuid(NOBODY)


_ATTACKER = """\
import os, sys
pairs = [(sys.argv[a], sys.argv[a + 1]) for a in range(2, len(sys.argv), 2)]
while True:
    for target, link in pairs:
        try:
            os.symlink(target, link)
        except FileExistsError:
            pass
        except OSError:  # the directory is gone: the test is over
            sys.exit(0)
    if sys.argv[1] == "once" or os.path.exists(sys.argv[1]):
        break
"""


def _attack(*links: tuple[Path, Path], until: Path | None = None) -> subprocess.Popen[bytes]:
    """Plants each (link, target) symbolic link as the attacker (nobody):
    once, or (until given) again and again until that file exists."""
    args = [str(x) for link, target in links for x in (target, link)]
    proc = subprocess.Popen(
        ["python3", "-c", _ATTACKER, str(until) if until else "once", *args],
        preexec_fn=_as_attacker,
    )
    if not until:
        assert proc.wait(timeout=60) == 0
    return proc


@pytest.fixture
def shared() -> Iterator[tuple[Path, Path]]:
    """(a directory the attacker may write: group-writable, group nobody,
    not writable by everyone; a victim file of ours outside it). Under
    /var/tmp: pytest's own base directory is private to us."""
    base = Path(tempfile.mkdtemp(prefix="hetmem-h19-", dir="/var/tmp"))
    try:
        os.chmod(base, 0o755)  # the attacker must reach the directory
        d = base / "shared"
        d.mkdir()
        if IS_ROOT:
            os.chown(d, 0, NOBODY)
        os.chmod(d, 0o770)
        victim = base / "victim"
        victim.write_text(VICTIM_TEXT)
        yield d, victim
        assert victim.read_text() == VICTIM_TEXT
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _start_holding(env: dict[str, str], tmp_path: Path) -> subprocess.Popen[str]:
    marker = tmp_path / "holding"
    proc = subprocess.Popen(
        [str(TARGET), "hold", "4", str(marker)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(3000):  # the program is in main, holding its blocks
        if marker.exists() or proc.poll() is not None:
            break
        time.sleep(0.01)
    assert marker.exists(), proc.communicate(timeout=60)
    return proc


def test_profile_is_never_written_through_planted_links(
    shared: tuple[Path, Path], tmp_path: Path
) -> None:
    d, victim = shared
    out = d / "app.prof"
    env = _env(HETMEM_PROFILE=str(out), HETMEM_SAMPLER="none")
    proc = _start_holding(env, tmp_path)
    stop, attacker = d.parent / "stop", None  # where the attacker can see it
    try:
        # the names the old code would use for this process and the next
        # ones, and the target itself
        links = [(Path(f"{out}.tmp{pid}"), victim) for pid in range(proc.pid, proc.pid + 64)]
        _attack(*links, (out, victim))
        assert out.is_symlink()
        # and a loop that keeps planting them while the profile is written
        attacker = _attack(*links, until=stop)
        proc.send_signal(signal.SIGTERM)  # the profile is written on the way out
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop.touch()
        if attacker is not None:
            try:
                attacker.wait(timeout=60)
            finally:
                attacker.kill()
                attacker.wait()
    assert proc.returncode == -signal.SIGTERM, err
    assert victim.read_text() == VICTIM_TEXT
    st = os.lstat(out)
    assert stat.S_ISREG(st.st_mode), "the profile must be a regular file, not the planted link"
    assert st.st_uid == os.geteuid()
    header = json.loads(out.read_text().splitlines()[0])
    assert header["magic"] == "hetmem-profile" and header["pid"] == proc.pid
    # no temporary file of ours is left; the attacker's links are all still links
    ours = [p for p in d.iterdir() if not p.is_symlink()]
    assert ours == [out], ours
    assert "cannot write profile" not in err


def test_profile_refuses_a_world_writable_directory_without_sticky_bit(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    env = _env(HETMEM_PROFILE=str(d / "app.prof"), HETMEM_SAMPLER="none")
    proc = subprocess.run(
        [str(TARGET), "exit", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # refused before main
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hetmem: cannot start profile mode: ")
    assert f"chmod +t {d}" in lines[0]
    assert list(d.iterdir()) == []
    # with the sticky bit (as /tmp has) it is accepted
    os.chmod(d, 0o1777)
    proc = subprocess.run(
        [str(TARGET), "exit", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISREG(os.lstat(d / "app.prof").st_mode)


def test_stats_are_never_appended_through_a_link(shared: tuple[Path, Path]) -> None:
    d, victim = shared
    stats = d / "stats.json"
    _attack((stats, victim))
    env = _env(HETMEM_PROFILE=str(d / "app.prof"), HETMEM_SAMPLER="none", HETMEM_STATS=str(stats))
    proc = subprocess.run(
        [str(TARGET), "exit", "3"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3  # the program's own exit status still passes through
    assert victim.read_text() == VICTIM_TEXT
    assert stats.is_symlink()
    warn = [ln for ln in proc.stderr.splitlines() if ln.startswith("hetmem:")]
    assert len(warn) == 1, proc.stderr
    assert "symbolic link" in warn[0] and str(stats) in warn[0]


@pytest.mark.skipif(not IS_ROOT, reason="needs a file of another user")
def test_stats_refuse_a_file_of_another_user(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text("")
    os.chown(stats, NOBODY, NOBODY)
    env = _env(HETMEM_PROFILE=str(tmp_path / "app.prof"), HETMEM_SAMPLER="none",
               HETMEM_STATS=str(stats))  # fmt: skip
    proc = subprocess.run(
        [str(TARGET), "exit", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    assert stats.read_text() == ""
    assert "not a regular file of this user" in proc.stderr


def test_stats_file_is_created_private_and_appended(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    env = _env(HETMEM_PROFILE=str(tmp_path / "app.prof"), HETMEM_SAMPLER="none",
               HETMEM_STATS=str(stats))  # fmt: skip
    for _ in range(2):
        proc = subprocess.run(
            [str(TARGET), "exit", "0"], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert "hetmem:" not in proc.stderr
    assert stat.S_IMODE(os.lstat(stats).st_mode) == 0o600
    lines = stats.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["schema_version"] == 1 for ln in lines)
