# SPDX-License-Identifier: BSD-3-Clause
"""Man pages from the argparse definitions: hetmem(1), one hetmem-VERB(1)
per verb of `hetmem.cli.VERBS` (with its sub-verbs, such as the bench
suites, as sections) and hetmem-config(1).

  python -m hetmem.manpage man/man1            # what `make man` runs
  python -m hetmem.manpage --check man/man1    # exit 1 when a page is stale

The pages hold nothing of the machine that renders them (no date, no
terminal width, no path), so the committed ones can be checked against a
fresh rendering anywhere: tests/unit/test_manpages.py does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from hetmem import __version__, cli, libconfig

SECTION = "1"
MANUAL = "hetmem manual"
REGENERATE = "make man  (or: PYTHONPATH=python python3 -m hetmem.manpage man/man1)"
REGENERATE_NOTE = "do not edit, run `make man`."

BAD_INPUT = "bad input: an unknown option, a bad value or an unusable file; one line on stderr"
INTERRUPTED = "interrupted (Ctrl-C)"
# (status, meaning) per verb; verbs not named here use DEFAULT_EXIT
DEFAULT_EXIT = (("0", "it ran"), ("2", BAD_INPUT), ("130", INTERRUPTED))
TARGET_EXIT = (
    ("0", "it ran and every target was met"),
    ("1", "a target missed (the MISS lines say which)"),
    ("2", BAD_INPUT),
    ("130", INTERRUPTED),
)
COMMAND_EXIT = (
    ("N", "the command's own exit status, passed through unchanged; 128+N when signal N killed it"),
    ("2", "bad input to hetmem itself (before the command starts)"),
    ("126", "the command exists but cannot be executed, as in a shell"),
    ("127", "the command cannot be found, as in a shell"),
)
FLOW_EXIT = (
    ("0", "it ran (flow sweep and flow bench: and every target was met)"),
    ("1", "flow sweep or flow bench: a target missed (the MISS lines say which)"),
    ("2", BAD_INPUT),
    ("130", INTERRUPTED),
)
EXIT_STATUS = {
    "run": COMMAND_EXIT,
    "profile": COMMAND_EXIT,
    "bench": TARGET_EXIT,
    "demo": TARGET_EXIT,
    "flow": FLOW_EXIT,
}
MAIN_EXIT = (
    ("0", "the verb ran"),
    ("1", "a benchmark target missed (bench, demo, flow sweep, flow bench)"),
    ("2", BAD_INPUT),
    ("130", INTERRUPTED),
)
SCRIPT = "hetmem-config"  # the script's page is the `config` verb's too
CONFIG_EXIT = (("0", "printed what was asked"), ("2", "no option given, or " + BAD_INPUT))


# ---------------------------------------------------------------------------
# roff text


def _char(c: str) -> str:
    """One character of running text as roff reads it (ASCII out)."""
    if c == "\\":
        return "\\e"
    if c == "-":
        return "\\-"  # a minus, so that options copy and paste
    if ord(c) > 126:
        return f"\\[u{ord(c):04X}]"
    return c


def esc(text: str) -> str:
    """text for a roff text line: escapes, and no control character first."""
    out = "".join(_char(c) for c in text)
    return "\\&" + out if out[:1] in (".", "'") else out


def bold(text: str) -> str:
    return f"\\fB{esc(text)}\\fR"


def ital(text: str) -> str:
    return f"\\fI{esc(text)}\\fR"


def _verbatim(lines: Sequence[str]) -> bool:
    """A paragraph to keep as written: a list, a table or examples."""
    return any(ln[:1].isspace() or re.match(r"(- |\d+\. )", ln) for ln in lines[1:])


def paragraphs(text: str) -> list[str]:
    """A description written for --help, as roff: flowing prose is filled,
    paragraphs with indented lines (lists, examples) stay as they are."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        lines = para.rstrip().splitlines()
        if not lines:
            continue
        out.append(".PP")
        if _verbatim(lines):
            out += [".nf", *(esc(ln.rstrip()) for ln in lines), ".fi"]
        else:
            out.append(esc(" ".join(ln.strip() for ln in lines)))
    return out


# ---------------------------------------------------------------------------
# argparse, read


def _help(action: argparse.Action, prog: str) -> str:
    """The help text as argparse shows it (%(default)s and the like expanded)."""
    text = " ".join((action.help or "").split())
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if action.choices is not None:
        params["choices"] = ", ".join(str(c) for c in action.choices)
    return text % params if "%" in text else text


def _metavar(action: argparse.Action) -> tuple[str, ...]:
    if action.metavar is not None:
        mv = action.metavar
        return tuple(mv) if isinstance(mv, tuple) else (str(mv),)
    if action.choices is not None:
        return ("{" + ",".join(str(c) for c in action.choices) + "}",)
    return (action.dest.upper() if action.option_strings else action.dest,)


def _args(action: argparse.Action) -> str:
    """The argument part of an option or positional, in italics: M, [M], M ..."""
    names = _metavar(action)
    one = ital(names[0])
    n = action.nargs
    if n == 0:
        return ""
    if n == argparse.OPTIONAL:
        return f"[{one}]"
    if n == argparse.ZERO_OR_MORE:
        return f"[{one} ...]"
    if n == argparse.ONE_OR_MORE:
        return f"{one} [{one} ...]"
    if n in (argparse.REMAINDER, argparse.PARSER):
        return f"{one} ..."
    if isinstance(n, int):
        return " ".join(ital(names[i % len(names)]) for i in range(n))
    return one


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-verb, in the order --help lists them."""
    sub = _subparsers(parser)
    if sub is None:
        return []
    # Help strings are %-format strings to argparse ("%%" shows as "%").
    helps = {a.dest: (a.help or "").replace("%%", "%") for a in sub._choices_actions}
    return [(name, helps.get(name, ""), p) for name, p in sub.choices.items()]


def _shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help is not argparse.SUPPRESS]


# ---------------------------------------------------------------------------
# sections


def synopsis(parser: argparse.ArgumentParser) -> list[str]:
    """One line: the program, [OPTIONS] when it has any, its positionals."""
    parts = [bold(parser.prog)]
    if any(a.option_strings for a in _shown(parser)):
        parts.append(f"[{ital('OPTIONS')}]")
    for a in _shown(parser):
        if a.option_strings:
            continue
        if isinstance(a, argparse._SubParsersAction):
            parts.append(f"{ital(str(a.metavar or 'COMMAND'))} ...")
        else:
            parts.append(_args(a))
    return [".nf", " ".join(parts), ".fi"]


def _item(head: str, body: str) -> list[str]:
    return [".TP", head, esc(body)] if body else [".TP", head]


def _heading(title: str, nested: bool) -> list[str]:
    """A section of the page (.SH), or a bold line inside a sub-verb's .SS."""
    return [".PP", f".B {title}"] if nested else [f".SH {title.upper()}"]


def options(parser: argparse.ArgumentParser, nested: bool = False) -> list[str]:
    """Arguments (positionals with help) and options, one .TP item each."""
    out: list[str] = []
    positionals = [
        a
        for a in _shown(parser)
        if not a.option_strings and a.help and not isinstance(a, argparse._SubParsersAction)
    ]
    if positionals:
        out += _heading("Arguments", nested)
        for a in positionals:
            out += _item(_args(a), _help(a, parser.prog))
    flags = [a for a in _shown(parser) if a.option_strings]
    if flags:
        out += _heading("Options", nested)
        for a in flags:
            arg = _args(a)
            head = ", ".join(bold(s) + (" " + arg if arg else "") for s in a.option_strings)
            out += _item(head, _help(a, parser.prog))
    return out


def _subsection(title: str) -> str:
    return '.SS "' + esc(title).replace('"', "\\(dq") + '"'


def sub_sections(parser: argparse.ArgumentParser) -> list[str]:
    """COMMANDS: each sub-verb with its synopsis, description and options."""
    subs = subcommands(parser)
    if not subs:
        return []
    out = [".SH COMMANDS"]
    for _name, text, sub in subs:
        out.append(_subsection(sub.prog))
        if text:
            out.append(esc(text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")))
        out += [".PP", *synopsis(sub)]
        out += paragraphs(sub.description or "")
        out += options(sub, nested=True)
    return out


def exit_status(rows: Iterable[tuple[str, str]]) -> list[str]:
    out = [".SH EXIT STATUS"]
    for status, meaning in rows:
        out += [".TP", bold(status) if status.isdigit() else ital(status), esc(meaning)]
    return out


def see_also(pages: Iterable[str]) -> list[str]:
    refs = [f"{bold(p)}({SECTION})" for p in pages]
    return [".SH SEE ALSO", ",\n".join(refs)]


def header(page: str, name_line: str) -> list[str]:
    """.TH (no date: the page must not change with the day) and NAME."""
    title = esc(page.upper())
    return [
        f'.\\" Generated by hetmem.manpage from the argparse definitions; {REGENERATE_NOTE}',
        f'.TH {title} {SECTION} "" "hetmem {esc(__version__)}" "{MANUAL}"',
        ".SH NAME",
        f"{esc(page)} \\- {esc(name_line)}",
    ]


# ---------------------------------------------------------------------------
# pages


def main_page(parser: argparse.ArgumentParser) -> str:
    verbs = subcommands(parser)
    lines = header("hetmem", "heterogeneous memory for HPC applications")
    lines += [".SH SYNOPSIS", ".nf", f"{bold('hetmem')} [{bold('--version')}] "
              f"{ital('VERB')} [{ital('OPTIONS')}] [{ital('ARGS')} ...]", ".fi"]  # fmt: skip
    lines += [".SH DESCRIPTION", *paragraphs(parser.description or "")]
    lines += paragraphs(
        "Each verb has its own page, hetmem-VERB(1), and its own --help. Sizes are "
        "accepted as 4096, 64K, 512MiB, 4G (K/M/G/T and KiB/MiB/GiB/TiB binary, "
        "kB/MB/GB/TB decimal). `hetmem config` lists the runtime options and their "
        "HETMEM_* environment variables. The user guide (which mode, and what to do "
        "when a program needs more memory than DRAM) is docs/guide.md in the source tree."
    )
    lines.append(".SH COMMANDS")
    for name, text, _ in verbs:
        see = f"See {bold('hetmem-' + name)}(1)."
        lines += [".TP", bold(f"hetmem {name}"), esc(text.rstrip(".")) + ". " + see]
    lines += exit_status(MAIN_EXIT)
    lines.append(".PP")
    lines.append(esc("hetmem run and hetmem profile exit with their command's own status."))
    refs = [f"hetmem-{name}" for name, _, _ in verbs]
    lines += see_also([*refs, SCRIPT] if SCRIPT not in refs else refs)
    return "\n".join(lines) + "\n"


def verb_page(name: str, text: str, parser: argparse.ArgumentParser) -> str:
    lines = header(f"hetmem-{name}", text)
    lines += [".SH SYNOPSIS", *synopsis(parser)]
    lines += [".SH DESCRIPTION", *paragraphs(parser.description or text)]
    lines += options(parser)
    lines += sub_sections(parser)
    lines += exit_status(EXIT_STATUS.get(name, DEFAULT_EXIT))
    if f"hetmem-{name}" == SCRIPT:
        lines += script_section()
    lines += see_also(["hetmem", "pkg-config"] if f"hetmem-{name}" == SCRIPT else ["hetmem"])
    return "\n".join(lines) + "\n"


def script_section() -> list[str]:
    """The hetmem-config script, which shares its page name with the verb."""
    parser = libconfig.build_parser()
    out = [".SH THE HETMEM\\-CONFIG SCRIPT", *paragraphs(
        "hetmem-config (a separate command, not a verb) prints where this installation's "
        "C library, headers, pkg-config and CMake files and man pages are."
    )]  # fmt: skip
    out += [".PP", *synopsis(parser), *paragraphs(parser.description or "")]
    out += options(parser, nested=True)
    out += [".PP", ".B Exit status"]
    for status, meaning in CONFIG_EXIT:
        out += [".TP", bold(status), esc(meaning)]
    return out


def pages() -> dict[str, str]:
    """File name -> roff text of every page."""
    parser = cli.build_parser()
    out = {f"hetmem.{SECTION}": main_page(parser)}
    for name, text, sub in subcommands(parser):
        out[f"hetmem-{name}.{SECTION}"] = verb_page(name, text, sub)
    return out


def stale(directory: Path) -> list[str]:
    """What differs between directory and a fresh rendering: pages missing,
    changed, or left over from a verb that is gone."""
    want = pages()
    have = {p.name: p for p in directory.glob(f"*.{SECTION}")} if directory.is_dir() else {}
    out = [f"{n}: missing" for n in sorted(set(want) - set(have))]
    out += [f"{n}: out of date" for n in sorted(set(want) & set(have))
            if have[n].read_text() != want[n]]  # fmt: skip
    out += [f"{n}: no such verb any more" for n in sorted(set(have) - set(want))]
    return out


def write(directory: Path) -> list[str]:
    """Writes every page into directory, removes the pages of verbs that are
    gone; returns the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    want = pages()
    for old in directory.glob(f"hetmem*.{SECTION}"):
        if old.name not in want:
            old.unlink()
    for name, text in want.items():
        (directory / name).write_text(text)
    return sorted(want)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hetmem.manpage",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", type=Path, help="where the pages go (man/man1)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.directory)
        for p in problems:
            print(f"{args.directory / p}", file=sys.stderr)
        if problems:
            print(f"regenerate with: {REGENERATE}", file=sys.stderr)
        return 1 if problems else 0
    names = write(args.directory)
    print(f"{len(names)} man pages in {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
