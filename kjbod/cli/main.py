"""The `kjbod` command: parse arguments, hand over to a subcommand, turn user errors into one line.

Strategy:

* Subcommands live in modules of this package. Each module defines `add_subcommand(subparsers)`, which adds its
  parser(s) and sets `func` (a callable taking the parsed arguments and returning an exit code) with
  `set_defaults(func=...)`. The built-in modules come first (`BUILTIN_MODULES`); any other module in kjbod/cli
  that defines `add_subcommand` is found and added automatically, so a new feature adds a command by adding a
  file (e.g. kjbod/cli/log_dirs.py for `kjbod log-dirs describe|move`), without editing this one.
* Subcommand modules import their heavy dependencies inside `func`, so `kjbod --help` stays fast.
* The error boundary: a `UserError`, a `ConfigError`, a storage setup error (unformatted or foreign log dirs), or
  an OSError (a file that cannot be read or written) ends as one line on stderr, `kjbod: error: ...`, and exit
  code 2. Argument errors look the same (argparse's usage block is left out; `--help` shows it). Anything else is
  a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kjbod import __version__

__all__ = ["BUILTIN_MODULES", "EXIT_USAGE", "SUBCOMMANDS", "UserError", "build_parser", "main"]

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe
EXIT_INTERRUPTED = 130

# Modules whose commands come first in `kjbod --help`, in this order.
BUILTIN_MODULES = ("serve", "storage_tool")
_NOT_COMMAND_MODULES = frozenset({"main", "__main__"})

# Extra registration functions (same signature as a module's add_subcommand), for code that builds commands
# without a module of its own.
SUBCOMMANDS: list[Callable[[Any], None]] = []


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def error_text(code: int, message: str | None) -> str:
    """A Kafka error code and its message as the commands print them: "NAME: message" (the name alone without a
    message; "error N" for a code this version does not know)."""
    from kjbod.protocol.errors import ErrorCode

    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other user error; `--help` still prints the usage.
        self.exit(EXIT_USAGE, f"kjbod: error: {message} (see '{self.prog} --help')\n")


def _command_modules() -> list[Any]:
    import kjbod.cli as package

    names = list(BUILTIN_MODULES)
    found = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)
    names += [n for n in found if n not in names and n not in _NOT_COMMAND_MODULES]
    modules = []
    for name in names:
        module = importlib.import_module(f"kjbod.cli.{name}")
        if callable(getattr(module, "add_subcommand", None)):
            modules.append(module)
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kjbod", description="Apache Kafka's JBOD feature set: a Kafka-protocol server and tools."
    )
    parser.add_argument("--version", action="version", version=f"kjbod {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for module in _command_modules():
        module.add_subcommand(sub)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _user_errors() -> tuple[type[Exception], ...]:
    from kjbod.server.config import ConfigError

    errors: list[type[Exception]] = [UserError, ConfigError, OSError]
    try:
        from kjbod.storage.errors import StorageSetupError
    except ImportError:
        pass
    else:
        errors.append(StorageSetupError)
    return tuple(errors)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.splitlines())


def _drop_stdout() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush does not fail on the closed pipe again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests) or already closed
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kjbod` console script and `python -m kjbod`; returns the exit code."""
    code = _main(argv)
    try:
        sys.stdout.flush()  # here, not at the interpreter's exit, so that a closed pipe is seen below
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    user_errors = _user_errors()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        # Tools log problems only, readably, on stderr (stdout is their output); `serve` sets up its own logging.
        from kjbod.server.logging import configure_logging

        configure_logging("console", "warning")
        return int(args.func(args) or 0)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of our output went away (`kjbod ... | head`): stop quietly, as Unix tools do
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except user_errors as e:
        print(f"kjbod: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
