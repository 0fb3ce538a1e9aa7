"""`--command-config FILE`, as Kafka's tools take it: Kafka client properties for the connection to the cluster
(security.protocol=SSL and the ssl.* keys: ssl.truststore.location to trust the brokers, ssl.keystore.* for mutual
TLS; SASL_PLAINTEXT or SASL_SSL with sasl.mechanism and sasl.jaas.config). Read once, turned into the admin client's options; a problem is one line naming the file and the key."""

from __future__ import annotations

import argparse
from typing import Any

from kjbod.cli.main import UserError

__all__ = ["add_command_config", "admin_options"]


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties for the connection (security.protocol=SSL, "
                             "ssl.truststore.location, ssl.keystore.* for mutual TLS; SASL_PLAINTEXT or SASL_SSL "
                             "with sasl.mechanism (PLAIN, SCRAM-SHA-256/512) and sasl.jaas.config)")


def admin_options(args: argparse.Namespace) -> dict[str, Any]:
    """The AdminClient options --command-config asks for ({} without it)."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    from kjbod.admin.security import connection_options_from
    from kjbod.server.config import ConfigError, parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            entries = parse_properties(f.read())
    except OSError as e:
        raise UserError(f"--command-config: cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ConfigError) as e:
        raise UserError(f"--command-config {path}: {e}") from None
    props = {key: value for _, key, value in entries}
    try:
        return connection_options_from(props)
    except ValueError as e:
        raise UserError(f"--command-config {path}: {e}") from None
