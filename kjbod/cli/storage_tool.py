"""`kjbod format` and `kjbod random-uuid`: the storage tool, like Kafka's kafka-storage.sh."""

from __future__ import annotations

import argparse
import re
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
    p.add_argument("--release-version", "-r", metavar="VERSION",
                   help="the metadata.version a new cluster starts at, as a release (3.9, 4.0-IV1) or a level; "
                        "the other features start at the levels Kafka ties to it (default: the latest kjbod runs)")
    p.add_argument("--feature", "-f", metavar="NAME=LEVEL", action="append", default=[],
                   help="start a feature at this level instead (repeatable), e.g. eligible.leader.replicas.version=0")
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
    # Always written: the levels chosen now are the ones the first controller writes to the log, whatever kjbod
    # version first starts it (without options, the bootstrap levels of the latest level kjbod runs).
    levels = bootstrap_levels(args.release_version, args.feature)
    voters = _initial_voters(args, config)
    formatted = set(format_dirs(config, cluster_id=args.cluster_id,
                                bootstrap_voters=voters.to_record() if voters is not None else None,
                                bootstrap_levels=levels))
    for path in dict.fromkeys([*config.log_dirs, config.metadata_log_dir]):
        print(f"{path}: {'formatted' if path in formatted else 'already formatted'}")
    return 0


def bootstrap_levels(release_version: str | None, features: list[str]) -> dict[str, int]:
    """The feature levels a new cluster starts at (kafka-storage.sh format's --release-version and --feature);
    UserError naming the problem for a release kjbod does not run, a malformed or unknown feature, a level
    kjbod cannot run, or a level whose dependency the others do not meet."""
    from kjbod.cli.main import UserError
    from kjbod.metadata import features as ft

    lo, hi = ft.SUPPORTED[ft.METADATA_VERSION]
    try:
        mv = ft.LATEST_METADATA_VERSION if release_version is None else ft.metadata_version_level(release_version)
    except ValueError as e:
        raise UserError(f"--release-version: {e}") from None
    if not lo <= mv <= hi:
        raise UserError(f"--release-version: metadata.version {mv} is not one kjbod runs "
                        f"({lo} = {ft.release_name(lo)} to {hi} = {ft.release_name(hi)})")
    levels = ft.bootstrap_levels(mv)
    for item in features:
        name, sep, text = item.partition("=")
        name = name.strip()
        # ASCII digits only: str.isdigit also takes "²" and other digits int() refuses or reads.
        if not sep or not name or not re.fullmatch(r"-?[0-9]+", text.strip()):
            raise UserError(f"--feature {item!r}: expected NAME=LEVEL, the level a whole number")
        if name == ft.METADATA_VERSION:
            raise UserError("--feature cannot set metadata.version: use --release-version")
        level = int(text.strip())
        flo, fhi = ft.SUPPORTED.get(name, (0, 0))
        if name not in ft.SUPPORTED:
            raise UserError(f"--feature: unknown feature {name!r} (kjbod serves "
                            f"{', '.join(sorted(n for n in ft.SUPPORTED if n != ft.METADATA_VERSION))})")
        if not flo <= level <= fhi:
            raise UserError(f"--feature: {name} level {level} is not one kjbod runs ({ft.range_text(flo, fhi)})")
        levels[name] = level
    for name, level in sorted(levels.items()):
        why = ft.dependency_refusal(name, level, levels)
        if why is not None:
            raise UserError(f"--release-version {ft.release_name(mv)}: {why}")
    return levels


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
