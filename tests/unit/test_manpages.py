# SPDX-License-Identifier: BSD-3-Clause
"""The man pages in man/man1 are what hetmem.manpage renders from today's
argparse definitions, cover every verb and sub-verb, and render cleanly."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hetmem import cli, manpage

REPO = Path(__file__).resolve().parents[2]
MAN1 = REPO / "man" / "man1"
# what the generator writes; anything else on a request line is a mistake
MACROS = {"TH", "SH", "SS", "PP", "TP", "nf", "fi", "B", '\\"'}


def test_committed_pages_are_up_to_date() -> None:
    problems = manpage.stale(MAN1)
    assert not problems, (
        "man/man1 differs from the argparse definitions: "
        + "; ".join(problems)
        + f". Regenerate with: {manpage.REGENERATE}"
    )


def test_every_verb_and_sub_verb_has_its_place() -> None:
    pages = manpage.pages()
    parser = cli.build_parser()
    for name, _, sub in manpage.subcommands(parser):
        page = pages[f"hetmem-{name}.1"]
        assert f"\\fBhetmem {name}\\fR" in pages["hetmem.1"]
        assert f"hetmem\\-{name} \\- " in page  # NAME line
        for _, _, nested in manpage.subcommands(sub):
            assert f'.SS "{manpage.esc(nested.prog)}"' in page
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"\\fB{manpage.esc(flag)}\\fR" in page, (name, flag)
    assert {f"hetmem-{v}.1" for v in cli.VERBS} | {"hetmem.1"} == set(pages)


def test_bench_suites_are_sections_of_the_bench_page() -> None:
    page = manpage.pages()["hetmem-bench.1"]
    for suite in ("sdm", "placement", "apps"):
        assert f'.SS "hetmem bench {suite}"' in page
    assert ".SH EXIT STATUS" in page and "a target missed" in page


def test_run_documents_that_the_command_status_passes_through() -> None:
    page = manpage.pages()["hetmem-run.1"]
    status = page.split(".SH EXIT STATUS", 1)[1]
    assert "the command's own exit status" in status and "\\fB127\\fR" in status


def test_the_config_page_also_documents_the_script() -> None:
    page = manpage.pages()["hetmem-config.1"]
    assert ".SH THE HETMEM\\-CONFIG SCRIPT" in page
    assert "\\fB\\-\\-mandir\\fR" in page and "\\fB\\-\\-json\\fR" in page


def test_stale_finds_changed_missing_and_left_over_pages(tmp_path: Path) -> None:
    manpage.write(tmp_path)
    assert manpage.stale(tmp_path) == []
    (tmp_path / "hetmem-run.1").write_text("edited by hand\n")
    (tmp_path / "hetmem-tiers.1").unlink()
    (tmp_path / "hetmem-gone.1").write_text(".TH X 1\n")
    assert manpage.stale(tmp_path) == [
        "hetmem-tiers.1: missing",
        "hetmem-run.1: out of date",
        "hetmem-gone.1: no such verb any more",
    ]
    manpage.write(tmp_path)
    assert manpage.stale(tmp_path) == [] and not (tmp_path / "hetmem-gone.1").exists()


def test_check_mode_exits_1_and_says_how_to_regenerate(tmp_path: Path, capsys) -> None:
    assert manpage.main(["--check", str(tmp_path)]) == 1
    assert "make man" in capsys.readouterr().err
    assert manpage.main([str(tmp_path)]) == 0
    assert manpage.main(["--check", str(tmp_path)]) == 0


def test_text_is_escaped_for_roff() -> None:
    assert manpage.esc(".hidden") == "\\&.hidden"
    assert manpage.esc("'quote") == "\\&'quote"
    assert manpage.esc("a\\b --x") == "a\\eb \\-\\-x"
    assert manpage.esc("5 µs") == "5 \\[u00B5]s"


def test_descriptions_keep_lists_and_fill_prose() -> None:
    out = manpage.paragraphs("one\ntwo\n\nlist:\n  a  first\n  b  second\n")
    assert out == [".PP", "one two", ".PP", ".nf", "list:", "  a  first", "  b  second", ".fi"]


def _sane(name: str, text: str) -> list[str]:
    """Without groff: request lines use known macros, the text is ASCII and
    no text line starts with a control character."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.isascii():
            bad.append(f"{name}:{n}: not ASCII")
        if line[:1] in (".", "'"):
            macro = re.match(r"[.'](\S+)", line)
            if not macro or macro.group(1) not in MACROS:
                bad.append(f"{name}:{n}: unknown request {line[:20]!r}")
    return bad


@pytest.mark.parametrize("name", sorted(manpage.pages()))
def test_page_renders_without_warnings(name: str) -> None:
    text = manpage.pages()[name]
    assert _sane(name, text) == []
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff is not installed: checked the roff by hand only")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z"], input=text,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0 and p.stderr == "", p.stderr
    shown = subprocess.run([groff, "-man", "-Tutf8", "-P-c"], input=text,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    plain = re.sub(".\b", "", shown.stdout)  # overstruck bold and underline
    assert plain.count("\n") > 20 and "EXIT STATUS" in plain and "SEE ALSO" in plain
