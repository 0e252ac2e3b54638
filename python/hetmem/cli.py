# SPDX-License-Identifier: BSD-3-Clause
"""The `hetmem` command: a thin dispatcher over one module per verb.

Each verb lives in hetmem.commands.<verb> and defines a Command class with
`name`, `help`, `add_arguments(parser)` and `run(args) -> int`. Errors a user
can cause are HetmemError: printed as one line, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol

from hetmem import __version__, child
from hetmem.errors import HetmemError

# Verb modules, in the order `hetmem --help` lists them.
VERBS = (
    "demo",
    "recommend",
    "tiers",
    "report",
    "probe",
    "bench",
    "run",
    "flow",
    "profile",
    "advise",
    "config",
)


class Command(Protocol):
    name: str
    help: str
    description: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _load(verb: str) -> Command:
    module = importlib.import_module(f"hetmem.commands.{verb}")
    return module.Command()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `only` one verb's: its module alone
    is imported (a verb's run starts in about half the time, which a
    script that runs `hetmem run` many times, or a TCG guest, notices)."""
    parser = _Parser(
        prog="hetmem",
        description="Heterogeneous memory for HPC applications: know the tiers, "
        "extend DRAM with a storage tier, place allocation sites, measure.",
    )
    parser.add_argument("--version", action="version", version=f"hetmem {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb in (only,) if only else VERBS:
        cmd = _load(verb)
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd)
    return parser


def one_line(message: str) -> str:
    """An error message on one line, whatever it quotes (a tool's stderr, a
    user's text with newlines)."""
    return " / ".join(ln.strip() for ln in message.splitlines() if ln.strip())


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words[0] if words and words[0] in VERBS else None)
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help()
        return 2
    # A verb called with an argv list (`hetmem demo` runs `bench` so) sees
    # that command line in sys.argv, as it would from a shell: bench records
    # `hetmem bench ...` from sys.argv in its manifest as the way to rerun it.
    outer = sys.argv
    if argv is not None:
        sys.argv = [outer[0] if outer else "hetmem", *argv]
    try:
        # SIGTERM and SIGHUP (a batch system's time limit, a closed
        # terminal) stop the verb through its clean-up: commands it runs
        # are stopped, temporary files removed (hetmem.child)
        with child.stop_on_signals():
            return command.run(args)
    except child.Interrupted as exc:
        # not an error of the user's: said as the shell would, after the clean-up
        sys.stderr.write(f"hetmem {command.name}: {exc}\n")
        return exc.exit_code
    except HetmemError as exc:
        sys.stderr.write(f"hetmem {command.name}: error: {one_line(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"hetmem {command.name}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    finally:
        sys.argv = outer
