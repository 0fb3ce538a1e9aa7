"""`kjbod format` and `kjbod random-uuid`: the storage tool, like Kafka's kafka-storage.sh."""

from __future__ import annotations

import argparse
from typing import Any


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser(
        "format",
        help="write meta.properties to every log dir (like kafka-storage.sh format)",
        description="Create and format every log dir and the metadata log dir of a node. Dirs already formatted "
        "for the same cluster and node are left alone.",
    )
    p.add_argument("-c", "--config", required=True, metavar="FILE", help="server.properties file")
    p.add_argument("--cluster-id", metavar="ID", help="cluster id (a Kafka Uuid); random when omitted")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="set a config key")
    p.set_defaults(func=run_format)

    p = sub.add_parser(
        "random-uuid", help="print a new random Kafka Uuid", description="Print a new random Uuid."
    )
    p.set_defaults(func=run_random_uuid)


def run_format(args: argparse.Namespace) -> int:
    from kjbod.server.config import load_config
    from kjbod.storage.meta import format_dirs

    config = load_config(args.config, args.override)
    formatted = set(format_dirs(config, cluster_id=args.cluster_id))
    for path in dict.fromkeys([*config.log_dirs, config.metadata_log_dir]):
        print(f"{path}: {'formatted' if path in formatted else 'already formatted'}")
    return 0


def run_random_uuid(args: argparse.Namespace) -> int:
    from kjbod.storage.ids import random_directory_id

    print(random_directory_id())
    return 0
