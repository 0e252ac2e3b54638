# SPDX-License-Identifier: BSD-3-Clause
"""The commit-message rule: .githooks/commit-msg on good and bad messages,
the hook inside a real `git commit`, .ci/check-commits over planted
histories (a non-compliant merge, a left-over fixup!, a shallow clone), and
`make hooks`. Temporary repositories only; no network, a few seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

HOOK = REPO / ".githooks" / "commit-msg"
CHECK = REPO / ".ci" / "check-commits"
BODY = "\n\nWhy it changed, with the figures.\n\nRan: pytest -q tests/test_x.py (3 passed).\n"
SCISSORS = "# ------------------------ >8 ------------------------"


def _env(home: Path) -> dict[str, str]:
    """A git that reads no user or system config and sees no outer repo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(home),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CEILING_DIRECTORIES=str(home.parent),
        GIT_AUTHOR_NAME="T",
        GIT_AUTHOR_EMAIL="t@example.org",
        GIT_COMMITTER_NAME="T",
        GIT_COMMITTER_EMAIL="t@example.org",
        GIT_EDITOR="true",
    )
    return env


def _hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "COMMIT_EDITMSG"
    f.write_text(message)
    return subprocess.run(
        [sys.executable, str(HOOK), str(f)], capture_output=True, text=True, timeout=30
    )


GOOD = [
    "pager: split the fault path from the handler" + BODY,
    "pager, preload: take the region table out of handler.c" + BODY,
    "tiers: " + "x" * 65 + BODY,  # exactly 72 characters
    # what `git commit -v` hands the hook: comments and a diff below the scissors
    "ci: check commits after the baseline\n# Please enter the commit message\n"
    + BODY
    + f"# comment\n{SCISSORS}\ndiff --git a/x b/x\nno blank line here. Too long "
    + "y" * 80,
    "\n\nbench: trailing blanks and leading empty lines are git's to strip   " + BODY + "\n\n",
    "docs: end the subject with a version 1.2 number, not a period" + BODY,
    # transient autosquash commits: the hook checks the target's subject only
    "fixup! pager: split the fault path from the handler\n",
    "squash! fixup! pager: split the fault path\n\nmore of the body\n",
]


@pytest.mark.parametrize("message", GOOD)
def test_hook_accepts(tmp_path: Path, message: str):
    proc = _hook(tmp_path, message)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


BAD = [
    ("tiers: " + "x" * 66 + BODY, "subject is 73 characters, more than 72"),
    ("split the fault path" + BODY, "no area (want 'area: imperative summary')"),
    ("Merge branch 'topic' into main" + BODY, "no area"),
    ('Revert "pager: split the fault path"' + BODY, "no area"),
    ("kernel: split the fault path" + BODY, "unknown area 'kernel'"),
    ("pager,preload: split" + BODY, "unknown area 'pager,preload'"),
    ("Pager: split the fault path" + BODY, "unknown area 'Pager'"),
    ("pager: split the fault path\nThe body starts at once.\n", "no blank line after the subject"),
    ("pager: split the fault path." + BODY, "subject ends with a period"),
    ("pager: split the fault path\n", "no body"),
    ("pager: " + BODY, "no summary after the area"),
    ("pager:split the fault path" + BODY, "want one space after the area's colon"),
    ("# only a comment\n\n", "empty message"),
    ("fixup! kernel: split" + BODY, "unknown area 'kernel'"),
]


@pytest.mark.parametrize(("message", "reason"), BAD)
def test_hook_rejects(tmp_path: Path, message: str, reason: str):
    proc = _hook(tmp_path, message)
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("commit-msg: ") and reason in first, proc.stderr
    assert "DEVELOPERS.md, Commits" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_hook_reports_every_problem(tmp_path: Path):
    proc = _hook(tmp_path, "Split the fault path, " + "x" * 60 + ".\n")
    reasons = [line.split(": ")[1] for line in proc.stderr.splitlines() if line.endswith("x.")]
    assert [r.split(" ")[0:2] for r in reasons] == [
        ["subject", "is"],
        ["no", "area"],
        ["no", "body"],
    ]


# ---------------------------------------------------------------------------
# In git, and over a history
# ---------------------------------------------------------------------------


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env=_env(repo),
        capture_output=True,
        text=True,
        check=check,
        timeout=30,
    )


def _commit(repo: Path, message: str) -> str:
    """An empty commit with message, its short hash. git's own clean-up."""
    _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", message)
    return _git(repo, "rev-parse", "--short", "HEAD").stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    return repo


def test_hook_in_git_commit(tmp_path: Path):
    repo = _repo(tmp_path)
    _git(repo, "config", "core.hooksPath", str(HOOK.parent))
    bad = _git(repo, "commit", "--allow-empty", "-m", "Fix things", check=False)
    assert bad.returncode != 0 and "no area" in bad.stderr
    assert _git(repo, "rev-list", "--all").stdout == ""  # nothing was committed
    good = _git(repo, "commit", "--allow-empty", "-m", "tests: plant a commit" + BODY, check=False)
    assert good.returncode == 0, good.stderr
    # git merge runs the hook too: its default subject is refused
    _git(repo, "checkout", "-q", "-b", "topic")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "tests: on the topic" + BODY)
    _git(repo, "checkout", "-q", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "tests: on main" + BODY)
    # comment lines in the editor's file are git's, whatever character it uses
    _git(repo, "config", "core.commentChar", ";")
    ed = _git(repo, "commit", "--allow-empty", "-e", "-m", "tests: no body", check=False)
    assert ed.returncode != 0 and "no body" in ed.stderr
    _git(repo, "config", "--unset", "core.commentChar")
    merge = _git(repo, "merge", "--no-ff", "--no-edit", "topic", check=False)
    assert merge.returncode != 0 and "no area" in merge.stderr
    _git(repo, "merge", "--abort")
    msg = "tests: merge the topic" + BODY
    assert _git(repo, "merge", "-q", "--no-ff", "-m", msg, "topic", check=False).returncode == 0


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args],
        cwd=cwd,
        env=_env(cwd),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_commits_after_the_baseline(tmp_path: Path):
    repo = _repo(tmp_path)
    base = _commit(repo, "Initial import, before the rule: not checked")
    long_subject = "tiers: " + "y" * 73
    c_long = _commit(repo, long_subject)
    _commit(repo, "tiers: a good one" + BODY)
    _git(repo, "checkout", "-q", "-b", "topic")
    _commit(repo, "pager, preload: on a branch" + BODY)
    _git(repo, "checkout", "-q", "main")
    _commit(repo, "docs: beside the branch" + BODY)
    _git(repo, "merge", "-q", "--no-ff", "--no-verify", "-m", "Merge branch 'topic'", "topic")
    c_merge = _git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    c_fixup = _commit(repo, "fixup! tiers: a good one")
    _commit(repo, "ci: good again" + BODY)
    _commit(repo, "ci: and again" + BODY)

    proc = _check(repo, "--base", base)
    assert proc.returncode == 1, proc.stderr
    assert sorted(proc.stdout.splitlines()) == sorted(
        [
            f"{c_long}: subject is 80 characters, more than 72: {long_subject}",
            f"{c_long}: no body (say why, with the figures and the commands run): {long_subject}",
            f"{c_merge}: no area (want 'area: imperative summary'): Merge branch 'topic'",
            f"{c_merge}: no body (say why, with the figures and the commands run): "
            "Merge branch 'topic'",
            f"{c_fixup}: fixup!/squash!/amend! commit left in the history "
            "(git rebase --autosquash): fixup! tiers: a good one",
        ]
    )
    assert "3 of 8 commits break the commit-message rule" in proc.stderr

    # After the last bad commit: all good, nothing on stdout.
    proc = _check(repo, "--base", c_fixup)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "2 commits follow the commit-message rule" in proc.stderr

    # A shallow clone without the baseline checks what it has, and says so.
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "2", f"file://{repo}", str(shallow))
    proc = _check(shallow, "--base", base)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "is not in this clone (a shallow clone): checking the 2 commits present" in proc.stderr
    proc = _check(repo, "--base", "0" * 40)
    assert proc.returncode == 1 and f"{base}: no body" in proc.stdout


def test_check_commits_outside_a_repository(tmp_path: Path):
    (tmp_path / "export").mkdir()
    proc = _check(tmp_path / "export")
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "not a git work tree" in proc.stderr


def test_make_hooks(tmp_path: Path):
    repo = _repo(tmp_path)

    def make(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-s", "-f", str(REPO / "Makefile"), target],
            cwd=repo,
            env=_env(repo),
            capture_output=True,
            text=True,
            timeout=30,
        )

    def hooks_path() -> str:
        return _git(repo, "config", "--get", "core.hooksPath", check=False).stdout.strip()

    assert make("hooks-if-unset").returncode == 0 and hooks_path() == ".githooks"
    _git(repo, "config", "core.hooksPath", "my-hooks")
    assert make("hooks-if-unset").returncode == 0 and hooks_path() == "my-hooks"
    proc = make("hooks")
    assert proc.returncode == 0 and hooks_path() == ".githooks"
    assert proc.stdout == "git config core.hooksPath .githooks (was my-hooks)\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    proc = subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "hooks"],
        cwd=outside,
        env=_env(outside),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0 and "not a git work tree" in proc.stderr
