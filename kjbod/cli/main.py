"""The `kjbod` command: parse arguments, then hand over to the server, storage or admin code.

Every user error ends as one line on stderr (`kjbod: error: ...`) and exit code 2, never a traceback.
Subcommand modules register themselves through `SUBCOMMANDS` so later features add commands without
touching this file's logic.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from kjbod import __version__

EXIT_USAGE = 2


class UserError(Exception):
    """A problem the user can fix; printed as one line."""


def _cmd_serve(args: argparse.Namespace) -> int:
    from kjbod.server.app import install_uvloop, serve
    from kjbod.server.config import ConfigError, load_config
    from kjbod.server.logging import configure_logging

    try:
        config = load_config(args.config, args.override or [])
    except ConfigError as e:
        raise UserError(str(e)) from None
    configure_logging(args.log_format, args.log_level)
    install_uvloop()
    from kjbod.storage.errors import StorageSetupError

    try:
        return asyncio.run(serve(config))
    except (ConfigError, StorageSetupError) as e:
        raise UserError(str(e)) from None


def _cmd_format(args: argparse.Namespace) -> int:
    from kjbod.server.config import ConfigError, load_config
    from kjbod.storage.errors import MetaPropertiesError
    from kjbod.storage.meta import format_dirs

    try:
        config = load_config(args.config, args.override or [])
        done = format_dirs(config, cluster_id=args.cluster_id)
    except (ConfigError, MetaPropertiesError) as e:
        raise UserError(str(e)) from None
    paths = list(dict.fromkeys([*config.log_dirs, config.metadata_log_dir]))
    for p in paths:
        state = "formatted" if p in done else "already formatted"
        print(f"{p}: {state}")
    return 0


def _cmd_random_uuid(args: argparse.Namespace) -> int:
    from kjbod.storage.ids import random_directory_id

    print(random_directory_id())
    return 0


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run a node (broker and/or controller)")
    p.add_argument("-c", "--config", required=True, help="server.properties file")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=_cmd_serve)


def _add_format(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("format", help="write meta.properties to every log dir (like kafka-storage.sh format)")
    p.add_argument("-c", "--config", required=True, help="server.properties file")
    p.add_argument("--cluster-id", help="cluster id (a Kafka Uuid); random when omitted")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    p.set_defaults(func=_cmd_format)


def _add_random_uuid(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("random-uuid", help="print a new random Kafka Uuid")
    p.set_defaults(func=_cmd_random_uuid)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_serve, _add_format, _add_random_uuid]


def _register_optional() -> None:
    """Subcommand modules that exist register themselves (e.g. kjbod.cli.log_dirs)."""
    import importlib

    for name in ("log_dirs", "analyze"):
        try:
            mod = importlib.import_module(f"kjbod.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"kjbod.cli.{name}":
                raise
            continue
        add = getattr(mod, "add_subcommand", None)
        if add is not None and add not in SUBCOMMANDS:
            SUBCOMMANDS.append(add)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own default also prints usage)
        self.exit(EXIT_USAGE, f"kjbod: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    _register_optional()
    parser = _Parser(prog="kjbod", description="Kafka JBOD server and tools")
    parser.add_argument("--version", action="version", version=f"kjbod {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"kjbod: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
