"""The pieces of kl's command line: the parser whose errors are usage
errors, the argument types, and the L{CommandTree} every command module
registers its sub-commands on."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from kilolock.core.model import parse_created
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_USAGE, KlError

#: A command: what it works with and its arguments in, the exit code out.
Handler = Callable[[Context, argparse.Namespace], int]

STATE_NAME_HELP = "the state: NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME"


class Parser(argparse.ArgumentParser):
    """argparse whose errors are exit code 2 with one clear line."""

    def error(self, message: str) -> NoReturn:
        raise KlError(EXIT_USAGE, f"{message} (see `{self.prog} --help`)")


class Subcommands(Protocol):
    """What C{ArgumentParser.add_subparsers} returns, as far as kl uses it."""

    def add_parser(self, name: str, **kwargs: Any) -> Any: ...


def positive_int(text: str) -> int:
    """A whole number from 1 (a version number, a count)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1")
    return int(text)


def positive_float(text: str) -> float:
    """A number above 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def rfc3339_time(text: str) -> str:
    """An RFC 3339 time, passed on as written."""
    if parse_created(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time"
                                         " (2026-01-02T03:04:05Z)")
    return text


def attribute_filter(text: str) -> str:
    """C{PATH=VALUE}, e.g. C{tags.Name=web}."""
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError("use PATH=VALUE, e.g. tags.Name=web")
    return text


class CommandTree:
    """kl's commands as the command modules register them, in the order
    they do (the order C{kl --help} lists them).

    @param top: the top-level sub-commands.
    @param common: the connection and output options every command takes.
    """

    def __init__(self, top: Subcommands, common: argparse.ArgumentParser) -> None:
        self.top = top
        self.common = common
        self._groups: dict[str, Subcommands] = {}

    def command(self, name: str, handler: Handler, help_text: str,
                group: str | None = None) -> argparse.ArgumentParser:
        """C{kl NAME}, or C{kl GROUP NAME}: a parser that runs C{handler}."""
        parent = self.top if group is None else self._groups[group]
        parser: argparse.ArgumentParser = parent.add_parser(
            name, parents=[self.common], help=help_text, description=help_text)
        parser.set_defaults(handler=handler)
        return parser

    def group(self, name: str, help_text: str) -> None:
        """C{kl NAME SUBCOMMAND}: a command that is only its sub-commands."""
        parser = self.top.add_parser(name, help=help_text)
        self.subcommands(name, parser, required=True)

    def subcommands(self, name: str, parser: argparse.ArgumentParser,
                    required: bool = False) -> None:
        """Let C{parser} (the command C{name}) take sub-commands; the one
        given lands in C{args.NAME_command}."""
        self._groups[name] = parser.add_subparsers(
            dest=f"{name}_command", required=required, metavar="SUBCOMMAND",
            parser_class=Parser)
