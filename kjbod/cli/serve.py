"""`kjbod serve -c server.properties [--override key=value ...]`: run a node (broker, controller, or both)."""

from __future__ import annotations

import argparse
from typing import Any

from kjbod.server.logging import LOG_FORMATS, LOG_LEVELS


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run a node (broker and/or controller)",
        description="Run a kjbod node until SIGTERM or SIGINT, then shut down cleanly (exit code 0).",
    )
    p.add_argument("-c", "--config", required=True, metavar="FILE", help="server.properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key on top of the file (repeatable)",
    )
    p.add_argument(
        "--log-format", choices=LOG_FORMATS, default="json", help="json lines (default) or console"
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from kjbod.server.app import run
    from kjbod.server.config import load_config
    from kjbod.server.logging import configure_logging

    config = load_config(args.config, args.override)
    configure_logging(args.log_format, args.log_level)
    return run(config)
