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
    quorum = p.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true",
                        help="start a dynamic quorum (kraft.version 1) with this controller as its only voter")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="a controller that joins a dynamic quorum later (add-controller)")
    quorum.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRECTORY_ID,...",
                        help="start a dynamic quorum with these voters; format every controller with the same list")
    p.set_defaults(func=run_format)

    p = sub.add_parser(
        "random-uuid", help="print a new random Kafka Uuid", description="Print a new random Uuid."
    )
    p.set_defaults(func=run_random_uuid)


def run_format(args: argparse.Namespace) -> int:
    from kjbod.server.config import load_config
    from kjbod.storage.meta import format_dirs

    config = load_config(args.config, args.override)
    voters = _initial_voters(args, config)
    formatted = set(format_dirs(config, cluster_id=args.cluster_id,
                                bootstrap_voters=voters.to_record() if voters is not None else None))
    for path in dict.fromkeys([*config.log_dirs, config.metadata_log_dir]):
        print(f"{path}: {'formatted' if path in formatted else 'already formatted'}")
    return 0


def _initial_voters(args: argparse.Namespace, config: Any) -> Any:
    """The first voters of a dynamic quorum (--standalone, --initial-controllers), or None (static voters, or
    --no-initial-controllers); UserError naming the problem, with kafka-storage.sh's messages where it has them."""
    from kjbod.cli.main import UserError
    from kjbod.raft.voters import VoterNode, VoterSet, parse_dynamic_voters, parse_uuid
    from kjbod.server.roles import controller_endpoint
    from kjbod.storage.ids import random_directory_id

    if not (args.standalone or args.initial_controllers):
        return None
    if getattr(config, "controller_quorum_voters", ()):
        flag = "--standalone" if args.standalone else "--initial-controllers"
        raise UserError(f"{flag} starts a dynamic quorum, but controller.quorum.voters is set (a static quorum): "
                        "remove controller.quorum.voters and set controller.quorum.bootstrap.servers instead")
    names = tuple(getattr(config, "controller_listener_names", ()) or ()) or ("CONTROLLER",)
    if args.initial_controllers:
        try:
            return parse_dynamic_voters(args.initial_controllers, names[0])
        except ValueError as e:
            raise UserError(f"--initial-controllers: {e}") from None
    if not config.is_controller:
        raise UserError("You can only use --standalone on a controller.")
    endpoint = controller_endpoint(config)
    if endpoint is None:
        raise UserError("No controller listeners found.")
    host, port = endpoint
    directory = parse_uuid(random_directory_id())  # format_dirs gives it to the metadata log dir
    return VoterSet.of([VoterNode(config.node_id, directory, ((names[0], host or "localhost", port),))])


def run_random_uuid(args: argparse.Namespace) -> int:
    from kjbod.storage.ids import random_directory_id

    print(random_directory_id())
    return 0
