"""`kjbod configs` for client quotas: the options as kafka-configs.sh reads them (in process), and the command
against a real `kjbod serve` (its output and exit codes)."""

from __future__ import annotations

import subprocess

import pytest
from live import COMMAND, LiveServer, kjbod_server, kjbod_server_factory  # noqa: F401

from kjbod.cli.configs import java_double
from kjbod.cli.main import UserError, build_parser


def parsed(*argv: str):
    from kjbod.cli.configs import _check

    args = build_parser().parse_args(["configs", "--bootstrap-server", "127.0.0.1:1", *argv])
    return _check(args)


def test_entities_as_kafka_configs_reads_them() -> None:
    assert parsed("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default", "--add-config", "producer_byte_rate=1024,request_percentage=12.5") == (
        [("users", "alice"), ("clients", "")], {"producer_byte_rate": 1024.0, "request_percentage": 12.5}, [])
    assert parsed("--alter", "--client-defaults", "--delete-config", "consumer_byte_rate")[0] == [("clients", "")]
    assert parsed("--describe", "--entity-type", "users")[0] == [("users", None)]
    assert parsed("--alter", "--ip", "10.0.0.1", "--add-config", "connection_creation_rate=5")[1] == {
        "connection_creation_rate": 5.0}


@pytest.mark.parametrize(("argv", "message"), [
    (("--describe", "--alter", "--user", "a"), "exactly one action"),
    (("--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"),
     "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
    (("--alter", "--entity-type", "users", "--entity-name", "a", "--entity-type", "clients", "--add-config",
      "producer_byte_rate=1"), "--entity-name or --entity-default must be specified with each --entity-type for --alter"),
    (("--alter", "--entity-type", "ips", "--entity-type", "users", "--entity-default", "--entity-default",
      "--add-config", "x=1"), "Only 'users' and 'clients' entity types may be specified together"),
    (("--describe", "--entity-type", "planets", "--entity-name", "x"), "Invalid entity type planets"),
    (("--describe", "--entity-type", "planets"), "Invalid entity type planets"),
    (("--describe", "--user", "a", "--entity-type", "users"), "should not be used in conjunction"),
    (("--alter", "--user", "a", "--add-config", "connection_creation_rate=1"),
     "Only quota configs can be added for 'users' using --bootstrap-server. Unexpected config names: "
     "connection_creation_rate"),
    (("--alter", "--ip", "1.2.3.4", "--add-config", "producer_byte_rate=1"), "Only connection quota configs"),
    (("--alter", "--ip", "not-an-ip", "--add-config", "connection_creation_rate=1"), "must be a valid IP"),
    (("--alter", "--user", "a", "--add-config", "producer_byte_rate=fast"),
     "Cannot parse quota configuration value for producer_byte_rate: fast"),
    (("--alter", "--user", "a"), "At least one of --add-config"),
])
def test_option_mistakes(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("'", "'")):
        parsed(*argv)


def test_values_print_as_java_doubles() -> None:
    assert [java_double(v) for v in (1024.0, 12.5, 1e7, 1.5e-4, 2.5e20)] == [
        "1024.0", "12.5", "1.0E7", "1.5E-4", "2.5E20"]


def run(server: LiveServer, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, "configs", "--bootstrap-server", server.bootstrap, *argv], capture_output=True,
                          text=True, timeout=120)


def test_alter_and_describe_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    done = run(kjbod_server, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
               "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=1e7")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for user alice.\n"), done.stderr
    done = run(kjbod_server, "--alter", "--client-defaults", "--add-config", "request_percentage=50")
    assert done.stdout == "Completed updating default config for clients in the cluster.\n", done.stderr
    done = run(kjbod_server, "--alter", "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=100")
    assert done.returncode == 0, done.stderr
    done = run(kjbod_server, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
               "clients", "--entity-name", "app")
    assert done.stdout == ("Quota configs for user-principal 'alice', client-id 'app' are "
                           "consumer_byte_rate=1.0E7, producer_byte_rate=1024.0\n")
    done = run(kjbod_server, "--describe", "--entity-type", "clients")
    assert done.stdout == "Quota configs for the default client-id are request_percentage=50.0\n"
    done = run(kjbod_server, "--describe", "--ip", "127.0.0.1")
    assert done.stdout == "Quota configs for ip '127.0.0.1' are connection_creation_rate=100.0\n"
    # a key the entity does not have is refused before anything is sent, as kafka-configs.sh refuses it
    done = run(kjbod_server, "--alter", "--client-defaults", "--delete-config", "producer_byte_rate")
    assert (done.returncode, done.stderr) == (1, "Invalid config(s): producer_byte_rate\n")
    done = run(kjbod_server, "--alter", "--client-defaults", "--add-config", "producer_byte_rate=-1")
    assert done.returncode == 1
    assert "INVALID_REQUEST: Quota producer_byte_rate must be greater than 0" in done.stderr
    done = run(kjbod_server, "--alter", "--client-defaults", "--delete-config", "request_percentage")
    assert done.returncode == 0
    done = run(kjbod_server, "--describe", "--client-defaults")
    assert (done.returncode, done.stdout) == (0, "")
    done = run(kjbod_server, "--describe", "--entity-type", "users", "--entity-type", "clients")
    assert done.stdout.count("Quota configs for") == 1


def test_describe_users_shows_their_scram_credentials_as_the_tool(kjbod_server: LiveServer) -> None:  # noqa: F811
    """kafka-configs.sh --describe --entity-type users also lists the users' SCRAM credentials (made here by
    confluent-kafka's admin client), except with clients or a default entity."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": kjbod_server.bootstrap, "log_level": 0})
    upserts = [UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            b"carol-256")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
    assert run(kjbod_server, "--alter", "--user", "carol", "--add-config", "producer_byte_rate=100").returncode == 0
    done = run(kjbod_server, "--describe", "--user", "carol")
    assert done.stdout == ("Quota configs for user-principal 'carol' are producer_byte_rate=100.0\n"
                           "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192\n")
    done = run(kjbod_server, "--describe", "--user", "nobody")
    assert (done.returncode, done.stdout) == (0, "")
    done = run(kjbod_server, "--describe", "--user-defaults")
    assert (done.returncode, done.stdout) == (0, "")
