"""`kjbod features`: kafka-features.sh's describe, upgrade, downgrade and version-mapping, with its output.

    Feature: group.version<TAB>SupportedMinVersion: 0<TAB>SupportedMaxVersion: 1<TAB>FinalizedVersionLevel: 1<TAB>Epoch: 42
    Feature: metadata.version<TAB>SupportedMinVersion: 3.7-IV2<TAB>SupportedMaxVersion: 4.0-IV0<TAB>
    FinalizedVersionLevel: 4.0-IV0<TAB>Epoch: 42
    Feature: transaction.version<TAB>SupportedMinVersion: 0<TAB>SupportedMaxVersion: 1<TAB>...

describe reads ApiVersions (the answering broker's supported ranges, the cluster's finalized levels and the
metadata offset they come from); upgrade and downgrade send UpdateFeatures (`--metadata 3.8`, `--release-version
3.8`, or `--feature name=level`, repeatable; `--dry-run` validates only; downgrade takes `--unsafe`), one line per
feature in Kafka's words ("metadata.version was upgraded to 20.", "Could not upgrade ... . <why>"), exit 1 when
any failed.  metadata.version levels are printed as releases, as Kafka's tool prints them.  version-mapping prints
a release's metadata.version and the transaction.version, group.version and eligible.leader.replicas.version
Kafka derives from it (capped at what kjbod runs).
`--release-version` sets metadata.version only (Kafka's tool also moves the other features to their levels for
that release).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.main import UserError

__all__ = ["add_subcommand"]

EXIT_FAILED = 1


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "features", help="describe, upgrade or downgrade the cluster's feature levels (kafka-features.sh)",
        description="The cluster's finalized feature levels (metadata.version, group.version, transaction.version, "
                    "eligible.leader.replicas.version), "
                    "as kafka-features.sh shows and "
                    "changes them.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                        help="a broker to connect to (comma-separated for several)")
    add_command_config(parser)
    actions = parser.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    actions.add_parser("describe", help="the supported and finalized levels of each feature")
    for name, text in (("upgrade", "raise feature levels"), ("downgrade", "lower feature levels")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--metadata", metavar="VERSION", help="the metadata.version, e.g. 3.8 or 3.7-IV2")
        action.add_argument("--release-version", metavar="VERSION",
                            help="the release whose feature levels to set, e.g. 3.9")
        action.add_argument("--feature", metavar="NAME=LEVEL", action="append", default=[],
                            help="a feature and its level (repeatable)")
        action.add_argument("--dry-run", action="store_true", help="validate only: change nothing")
        if name == "downgrade":
            action.add_argument("--unsafe", action="store_true",
                                help="allow a downgrade that may lose metadata (refused for metadata.version)")
    mapping = actions.add_parser("version-mapping", help="the feature levels of a release")
    mapping.add_argument("--release-version", metavar="VERSION", help="the release (default: the newest served)")
    parser.set_defaults(func=_command)


def _updates(args: argparse.Namespace) -> dict[str, int]:
    """The levels asked for, checked before anything is sent (one line, exit 2)."""
    from kjbod.metadata import features as ft

    if args.release_version is not None and (args.metadata is not None or args.feature):
        raise UserError("--release-version cannot be given with --metadata or --feature")
    out: dict[str, int] = {}
    for text in ([args.metadata] if args.metadata is not None else []) + (
            [args.release_version] if args.release_version is not None else []):
        try:
            out[ft.METADATA_VERSION] = ft.metadata_version_level(text)
        except ValueError as e:
            raise UserError(str(e)) from None
    for item in args.feature:
        name, sep, level = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"can't parse feature=level string {item!r}: expected NAME=LEVEL")
        try:
            value = int(level.strip())
        except ValueError:
            raise UserError(f"can't parse feature=level string {item!r}: {level.strip()!r} is not a whole number") \
                from None
        if name in out:
            raise UserError(f"feature {name} was given more than once")
        out[name] = value
    if not out:
        raise UserError(f"give at least one feature to {args.features_command} (--metadata, --release-version or "
                        "--feature)")
    return out


def _command(args: argparse.Namespace) -> int:
    from kjbod.metadata import features as ft

    if args.features_command == "version-mapping":
        text = args.release_version or ft.release_name(ft.LATEST_METADATA_VERSION)
        try:
            level = ft.metadata_version_level(text)
        except ValueError as e:
            raise UserError(str(e)) from None
        print(f"metadata.version={level} ({ft.release_name(level)})")
        for name in (ft.TRANSACTION_VERSION, ft.GROUP_VERSION, ft.ELR_VERSION, ft.SHARE_VERSION,
                     ft.STREAMS_VERSION):  # Kafka's order
            print(f"{name}={ft.default_level(name, level)}")
        return 0
    updates = _updates(args) if args.features_command in ("upgrade", "downgrade") else {}
    return asyncio.run(_run(args, updates))


def _level_text(feature: str, level: int) -> str:
    from kjbod.metadata import features as ft

    return ft.release_name(level) if feature == ft.METADATA_VERSION else str(level)


async def _run(args: argparse.Namespace, updates: dict[str, int]) -> int:
    from kjbod.admin.types import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
    from kjbod.cli.log_dirs import _admin

    async with _admin(args, "kjbod-features", timeout=30.0) as admin:
        from kjbod.admin import KafkaError

        if args.features_command == "describe":
            try:
                meta = await admin.describe_features()
            except KafkaError as e:
                raise UserError(str(e)) from None
            epoch = str(meta.finalized_epoch) if meta.finalized_epoch is not None else "-"
            for name in sorted(meta.supported):
                lo, hi = meta.supported[name]
                print(f"Feature: {name}\tSupportedMinVersion: {_level_text(name, lo)}\t"
                      f"SupportedMaxVersion: {_level_text(name, hi)}\t"
                      f"FinalizedVersionLevel: {_level_text(name, meta.finalized.get(name, 0))}\tEpoch: {epoch}")
            return 0
        op = args.features_command
        kind = UPGRADE if op == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
        try:
            results = await admin.update_features({n: (level, kind) for n, level in updates.items()},
                                                   validate_only=args.dry_run)
        except KafkaError as e:
            raise UserError(str(e)) from None
        failed = 0
        for name in sorted(results):
            error = results[name]
            if error is None:
                print(f"{name} {'can be' if args.dry_run else 'was'} {op}d to {updates[name]}.")
            else:
                failed += 1
                print(f"{'Can not' if args.dry_run else 'Could not'} {op} {name} to {updates[name]}. "
                      f"{getattr(error, 'message', None) or error}")
        if failed:
            print(f"{failed} out of {len(updates)} operation(s) failed.")
            return EXIT_FAILED
        return 0
