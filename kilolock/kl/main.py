"""The C{kl} command line: the parser (the connection and output options
every command takes, then each command module's sub-commands) and L{main},
the console script's entry point."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO

import kilolock
from kilolock.kl.arguments import CommandTree, Parser, positive_float
from kilolock.kl.commands import (
    control,
    devcert,
    events,
    history,
    locks,
    oidc,
    refactor,
    resources,
    retention,
    states,
    versions,
    workspaces,
)
from kilolock.kl.config import (
    DEFAULT_CONTROL_URL,
    DEFAULT_DISCOVERY_TIMEOUT,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    resolve_settings,
)
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_INTERRUPTED, EXIT_OK, KlError
from kilolock.kl.output import Output

#: The command modules, in the order C{kl --help} lists their commands.
COMMAND_GROUPS = (states, history, versions, retention, refactor, locks, resources, events,
                  control, oidc, workspaces, devcert)


def _common_options() -> argparse.ArgumentParser:
    """The connection and output options, taken by kl and by every command."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output (also KL_* variables, kl.toml)")
    group.add_argument("--url", default=argparse.SUPPRESS,
                       help=f"the Kilolock server [KL_URL, default {DEFAULT_URL}]")
    group.add_argument("--token", default=argparse.SUPPRESS,
                       help="API token, sent as a Bearer token [KL_TOKEN]")
    group.add_argument("--control-url", dest="control_url", default=argparse.SUPPRESS,
                       help=f"the control API [KL_CONTROL_URL, default {DEFAULT_CONTROL_URL}]")
    group.add_argument("--control-token", dest="control_token", default=argparse.SUPPRESS,
                       help="the control API's token [KL_CONTROL_TOKEN]")
    group.add_argument("--config", default=argparse.SUPPRESS,
                       help="config file [KL_CONFIG, default ~/.config/kilolock/kl.toml]")
    group.add_argument("--timeout", type=positive_float, default=argparse.SUPPRESS,
                       help=f"seconds per request [KL_TIMEOUT, default {DEFAULT_TIMEOUT:g}]")
    group.add_argument("--discovery-timeout", dest="discovery_timeout", type=positive_float,
                       default=argparse.SUPPRESS,
                       help="seconds lane discovery may take [KL_DISCOVERY_TIMEOUT, default"
                            f" {DEFAULT_DISCOVERY_TIMEOUT:g}]")
    group.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS,
                       help="CA bundle for https URLs [KL_CA_FILE]")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print JSON for scripts instead of tables")
    return common


def build_parser() -> argparse.ArgumentParser:
    """kl's whole command line."""
    common = _common_options()
    parser = Parser(prog="kl", parents=[common],
                    description="Inspect and repair the states of a Kilolock server.",
                    epilog="Exit codes: 0 ok, 1 refused, 2 usage, 3 not found, 4 locked or"
                           " conflict, 5 unreachable, 6 protocol, 7 broken audit chain."
                           " Reference: docs/kl.md")
    parser.add_argument("--version", action="version", version=f"kl {kilolock.__version__}")
    tree = CommandTree(parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                             parser_class=Parser), common)
    for module in COMMAND_GROUPS:
        module.register(tree)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one kl command.  @return: the exit code (docs/kl.md)."""
    out = stdout if stdout is not None else _lenient(sys.stdout)
    err = stderr if stderr is not None else _lenient(sys.stderr)
    env = os.environ if environ is None else environ
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        output = Output(out, err, as_json=bool(getattr(args, "json", False)))
        settings = resolve_settings(args, env, output.note)
        return int(args.handler(Context(settings, output), args))
    except KlError as error:
        err.write(f"kl: {error.message}\n")
        return error.code
    except KeyboardInterrupt:
        err.write("kl: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


def _lenient(stream: IO[str]) -> IO[str]:
    """C{stream} writing what its encoding cannot carry (an unpaired
    surrogate a server answered with) as a backslash escape, never failing."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    return stream


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
