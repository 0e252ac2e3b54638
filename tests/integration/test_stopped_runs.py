# SPDX-License-Identifier: BSD-3-Clause
"""A run stopped by a signal still leaves its profile (`hetmem profile`) or
statistics (`hetmem run --stats`), and the program still dies of the
signal (or handles it, when it set a handler)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_pager
from hetmem.placement import profile as P

# Holds 8 MiB from one site and touches it until stopped. With "own" it
# installs its own SIGTERM handler first and reports what sigaction said was
# there before: a profiled program must read SIG_DFL, as it would alone.
PROG = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }
__attribute__((noinline)) static char *hold(size_t n) { return malloc(n); }
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "own") == 0) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, &old);
    printf("old=%s\n", old.sa_handler == SIG_DFL ? "dfl" : "other");
  }
  if (argc > 1 && strcmp(argv[1], "toggle") == 0) { /* ignored a while, then the default */
    signal(SIGTERM, SIG_IGN);
    printf("old=%s\n", signal(SIGTERM, SIG_DFL) == SIG_IGN ? "ign" : "other");
  }
  char *a = hold(8u << 20);
  memset(a, 1, 8u << 20); /* touched before "ready": a stopped cache run has faulted */
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  for (unsigned i = 0; !stop; i++) {
    memset(a, (int)i, 8u << 20);
    usleep(1000);
  }
  printf("handled\n");
  free(a);
  return 0;
}
"""


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> str:
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("sigprog")
    (d / "p.c").write_text(PROG)
    subprocess.run(["gcc", "-O0", "-g", "-o", str(d / "p"), str(d / "p.c")], check=True)
    return str(d / "p")


def _start(
    prog: str, out: Path, *args: str, verb: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[str], int, list[str]]:
    verb = verb or ("profile", "-o", str(out))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", *verb, "--", prog, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a shell job is
    )
    assert proc.stdout is not None
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, f"the program ended early: {proc.communicate(timeout=30)}"
        lines.append(line.strip())
        if line.startswith("ready"):
            return proc, int(line.split()[1]), lines


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out, err


def _one_profile(out: Path) -> P.Profile:
    files = P.expand(str(out))
    assert len(files) == 1 and files[0] != str(out), files
    return P.load(files[0])


@pytest.mark.parametrize("how", ["ctrl-c", "term-to-hetmem", "timeout", "hup-to-program"])
def test_stopped_run_writes_its_profile_and_dies_of_the_signal(prog, tmp_path, how):
    out = tmp_path / "s.prof"
    proc, pid, _ = _start(prog, out)
    try:
        if how == "ctrl-c":  # the terminal signals the whole foreground group
            sig = signal.SIGINT
            os.killpg(proc.pid, sig)
        elif how == "term-to-hetmem":  # `kill`, a batch system
            sig = signal.SIGTERM
            os.kill(proc.pid, sig)
        elif how == "timeout":  # signals the group: the program gets it twice
            sig = signal.SIGTERM
            os.killpg(proc.pid, sig)
        else:
            sig = signal.SIGHUP
            os.kill(pid, sig)
        rc, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 128 + sig, err  # as the program alone would end
    p = _one_profile(out)
    assert p.header["stopped_by_signal"] == sig
    # the block the program held when it was stopped, never freed
    held = [s for s in p.sites if s.max_bytes == 8 << 20]
    assert len(held) == 1 and held[0].never_freed == 1, [vars(s) for s in p.sites]
    assert p.header["threads"] == 1  # hetmem's finisher thread is not the program's
    shown = subprocess.run(
        [sys.executable, "-m", "hetmem", "profile", "show", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and f"stopped by {sig.name}" in shown.stdout, shown


def test_default_set_again_is_still_caught(prog, tmp_path):
    out = tmp_path / "t.prof"
    proc, pid, lines = _start(prog, out, "toggle")
    try:
        assert "old=ign" in lines
        os.kill(pid, signal.SIGTERM)
        rc, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 143, err
    assert _one_profile(out).header["stopped_by_signal"] == signal.SIGTERM


def test_program_with_its_own_handler_keeps_it(prog, tmp_path):
    out = tmp_path / "h.prof"
    proc, pid, lines = _start(prog, out, "own")
    try:
        assert "old=dfl" in lines  # ours is not visible to the program
        os.kill(pid, signal.SIGTERM)
        rc, rest, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 0 and "handled" in rest, (rc, rest, err)
    p = _one_profile(out)
    assert p.header.get("stopped_by_signal", 0) == 0  # it ended normally
    held = [s for s in p.sites if s.max_bytes == 8 << 20]
    assert len(held) == 1 and held[0].never_freed == 0


def _write(path: Path, start: float, wall_s: float, sites: int) -> None:
    hdr = P.default_header(start_unix=start, wall_ns=int(wall_s * 1e9))
    recs = [
        {
            "frames": [[0, 100 + i]],
            "allocs": 1,
            "bytes": 1 << 20,
            "max_bytes": 1 << 20,
            "peak_live_bytes": 1 << 20,
            "samples": {"loads": 10, "stores": 0},
        }
        for i in range(sites)
    ]
    path.write_text(P.dumps(hdr, [("/bin/app", "ab" * 20)], recs))


def test_o_name_stands_for_the_latest_runs_files(tmp_path, hetmem):
    # an earlier run (one process) and the latest (launcher + 2 ranks)
    _write(tmp_path / "r.prof.norank.10", 1000.0, 5.0, 1)
    _write(tmp_path / "r.prof.norank.20", 2000.0, 9.0, 0)  # launcher: no site
    _write(tmp_path / "r.prof.0.21", 2000.5, 8.0, 2)
    _write(tmp_path / "r.prof.1.22", 2000.6, 8.1, 2)
    name = str(tmp_path / "r.prof")
    assert [Path(f).name for f in P.expand(name)] == [
        "r.prof.0.21",
        "r.prof.1.22",
        "r.prof.norank.20",
    ]
    assert P.expand(str(tmp_path / "r.prof.0.21")) == [str(tmp_path / "r.prof.0.21")]
    assert P.expand(str(tmp_path / "other")) == [str(tmp_path / "other")]
    proc = hetmem("advise", name, "--fast-budget", "1G", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    notes = " ".join(data["notes"])
    assert "per-process profile(s) of its latest run" in notes and "r.prof.norank.10" not in notes
    assert len(data["sites"]) == 2  # the ranks' two sites; not the earlier run's
    # two ranks with sites: show cannot pick one, and says which there are
    proc = hetmem("profile", "show", name)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "r.prof.0.21" in proc.stderr and "r.prof.1.22" in proc.stderr


@needs_pager
def test_stopped_cache_run_writes_its_statistics(prog, tmp_path):
    stats = tmp_path / "s.json"
    verb = ("run", "--mode", "cache", "--fast-budget", "4M", "--stats", str(stats))
    proc, _, _ = _start(prog, tmp_path / "unused", verb=verb)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        rc, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 143, err
    data = json.loads(stats.read_text())
    assert data["exit_code"] == 143 and data["signal"] == 15
    (one,) = data["processes"]
    assert one["stopped_by_signal"] == 15
    # the pager's counters of the run up to then: the 8 MiB block went through it
    assert data["pager"]["counters"]["faults"] > 0


# Three threads allocate and free 1 MiB blocks without pause while the
# profile is written: by the finisher after a signal, or at exit() from main.
CHURN = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static atomic_uint done;
static void *work(void *arg) {
  (void)arg;
  for (unsigned i = 0;; i++) {
    size_t n = (1u << 20) + (i % 7) * 4096;
    volatile char *p = malloc(n);
    p[0] = 1;
    p[n - 1] = 2;
    free((void *)p);
    atomic_fetch_add(&done, 1);
  }
  return NULL;
}
int main(int argc, char **argv) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, work, NULL);
  /* ready once the threads have allocated: a busy machine may not have
     run them at all before a signal sent at once */
  while (atomic_load(&done) < 300) usleep(1000);
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  if (argc > 1) {
    usleep(500000);
    exit(0);
  }
  for (;;) pause();
}
"""


@pytest.mark.parametrize("how", ["signal", "exit"])
def test_profile_written_while_threads_allocate(tmp_path, how):
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    (tmp_path / "c.c").write_text(CHURN)
    exe = str(tmp_path / "churn")
    subprocess.run(["gcc", "-O0", "-pthread", "-o", exe, str(tmp_path / "c.c")], check=True)
    out = tmp_path / "c.prof"
    proc, _, _ = _start(exe, out, *(["exit"] if how == "exit" else []))
    try:
        if how == "signal":
            os.kill(proc.pid, signal.SIGTERM)
        rc, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == (143 if how == "signal" else 0), err
    # readable: the blocks allocated after the profile's end are not in its
    # live series (they made it unreadable: 'live' times beyond wall_ns)
    p = _one_profile(out)
    (site,) = p.sites
    assert site.allocs > 100 and all(t <= p.wall_ns for t, _ in site.live)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_while_the_child_starts_reaches_it(monkeypatch, sig):
    # A SIGTERM that reaches hetmem after the child exists but before it is
    # known (a busy child can starve hetmem that long on 2 cores) used to
    # stop hetmem alone and leave the program running. Here it arrives
    # exactly then: the program must get it and hetmem report its death.
    from hetmem.run import proc as hrun

    real = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def popen_then_signal(*a, **kw):
        p = real(*a, **kw)
        started.append(p)
        os.kill(os.getpid(), sig)  # Python runs the handler before returning
        return p

    monkeypatch.setattr(hrun.subprocess, "Popen", popen_then_signal)
    state: dict = {}
    try:
        with hrun._signals(state):
            rc, _ = hrun._spawn(["sleep", "60"], dict(os.environ), state)
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert rc == 128 + sig and "pending" not in state
