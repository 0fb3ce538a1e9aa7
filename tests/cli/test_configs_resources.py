"""`kjbod configs` for topics, brokers and broker loggers: the options as kafka-configs.sh reads them (in process),
and the command against a real `kjbod serve` (its output, exit codes, and the configs it changed taking hold)."""

from __future__ import annotations

import subprocess

import pytest
from live import COMMAND, LiveServer, kjbod_server, kjbod_server_factory  # noqa: F401

from kjbod.cli.configs import split_add_config
from kjbod.cli.main import UserError, build_parser


def parsed(*argv: str):
    from kjbod.cli.configs import _check

    args = build_parser().parse_args(["configs", "--bootstrap-server", "127.0.0.1:1", *argv])
    return _check(args)


def test_add_config_brackets_as_kafka_configs_reads_them() -> None:
    assert split_add_config("retention.ms=1000,cleanup.policy=[compact,delete], a = b ") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "a": "b"}
    assert split_add_config("ssl.endpoint.identification.algorithm=") == {"ssl.endpoint.identification.algorithm": ""}
    with pytest.raises(UserError, match='format "key=val"'):
        split_add_config("retention.ms")
    with pytest.raises(UserError, match='format "key=val"'):
        split_add_config("a=1,b")


def test_resource_entities() -> None:
    assert parsed("--alter", "--topic", "t", "--add-config", "retention.ms=5,cleanup.policy=[compact,delete]") == (
        [("topics", "t")], {"retention.ms": "5", "cleanup.policy": "compact,delete"}, [])
    assert parsed("--describe", "--entity-type", "brokers")[0] == [("brokers", None)]
    assert parsed("--describe", "--entity-type", "brokers", "--entity-default")[0] == [("brokers", "")]
    assert parsed("--alter", "--broker-defaults", "--delete-config", "log.retention.ms")[0] == [("brokers", "")]
    assert parsed("--alter", "--broker-logger", "1", "--add-config", "kjbod.storage=DEBUG")[1] == {
        "kjbod.storage": "DEBUG"}
    assert parsed("--describe", "--all", "--broker", "1")[0] == [("brokers", "1")]


@pytest.mark.parametrize(("argv", "message"), [
    (("--describe", "--entity-type", "topics", "--entity-default"),
     "--entity-default must not be specified with --describe of topics"),
    (("--describe", "--entity-type", "broker-loggers"), "An entity name must be specified with --describe of "
     "broker-loggers"),
    (("--alter", "--entity-type", "topics", "--add-config", "a=1"), "An entity name must be specified with --alter "
     "of topics"),
    (("--alter", "--entity-type", "brokers", "--add-config", "a=1"), "An entity-name or default entity must be "
     "specified with --alter of users, clients, brokers or ips"),
    (("--describe", "--broker", "one"), "The entity name for brokers must be a valid integer broker id, but it is: "
     "one"),
    (("--describe", "--topic", "bad/name"), "contains characters other than ASCII"),
    (("--alter", "--topic", "t", "--add-config", "a=1", "--add-config-file", "/nonexistent"),
     "Only one of --add-config or --add-config-file must be specified"),
    (("--alter", "--topic", "t"), "At least one of --add-config, --add-config-file, or --delete-config must be "
     "specified with --alter"),
    (("--alter", "--topic", "t", "--add-config", "bad key=1"), "Invalid character found for config key: bad key"),
    (("--alter", "--all", "--topic", "t", "--add-config", "a=1"), "--all goes with --describe only"),
    (("--describe", "--entity-type", "topics", "--entity-type", "brokers"),
     "Only 'users' and 'clients' entity types may be specified together"),
    (("--describe", "--entity-type", "groups", "--entity-default"), "--entity-default must not be specified with --describe of groups"),
])
def test_option_mistakes(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError) as raised:
        parsed(*argv)
    assert message in str(raised.value)


def run(server: LiveServer, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, "configs", "--bootstrap-server", server.bootstrap, *argv], capture_output=True,
                          text=True, timeout=120)


def topics(server: LiveServer, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, "topics", "--bootstrap-server", server.bootstrap, *argv], capture_output=True,
                          text=True, timeout=120)


def test_topic_configs_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    made = topics(kjbod_server, "--create", "--topic", "orders", "--partitions", "1")
    assert made.returncode == 0, made.stderr
    done = run(kjbod_server, "--alter", "--entity-type", "topics", "--entity-name", "orders", "--add-config",
               "retention.ms=3600000,cleanup.policy=[compact,delete]")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for topic orders.\n"), done.stderr
    done = run(kjbod_server, "--describe", "--topic", "orders")
    lines = done.stdout.splitlines()
    assert lines[0] == "Dynamic configs for topic orders are:", done.stderr
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={"
                               "DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy="
                               "delete"), lines
    assert lines[2].startswith("  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
                               "3600000"), lines
    assert len(lines) == 3
    # The change took hold where it counts: the topic's own DescribeConfigs through kafka-topics' view.
    described = topics(kjbod_server, "--describe", "--topic", "orders")
    assert "cleanup.policy=compact,delete" in described.stdout and "retention.ms=3600000" in described.stdout

    done = run(kjbod_server, "--alter", "--topic", "orders", "--delete-config", "retention.ms")
    assert done.returncode == 0, done.stderr
    done = run(kjbod_server, "--describe", "--topic", "orders")
    assert [line.split("=")[0] for line in done.stdout.splitlines()] == [
        "Dynamic configs for topic orders are:", "  cleanup.policy"]
    everything = run(kjbod_server, "--describe", "--all", "--topic", "orders").stdout.splitlines()
    assert everything[0] == "All configs for topic orders are:"
    # Kafka's synonyms of a retention left at its default (log.retention.hours=168): none (see broker_config).
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in everything, everything
    assert ("  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}"
            in everything), everything
    assert len(everything) > 20

    # Without a name: every topic, internal ones too, each with its header.
    whole = run(kjbod_server, "--describe", "--entity-type", "topics").stdout
    assert "Dynamic configs for topic orders are:\n  cleanup.policy=compact,delete" in whole

    # Refusals: a key the topic does not set, a value the broker refuses, a topic that does not exist.
    done = run(kjbod_server, "--alter", "--topic", "orders", "--delete-config", "retention.ms")
    assert (done.returncode, done.stderr) == (1, "Invalid config(s): retention.ms\n")
    done = run(kjbod_server, "--alter", "--topic", "orders", "--add-config", "retention.ms=soon")
    assert done.returncode == 1 and "retention.ms" in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = run(kjbod_server, "--alter", "--topic", "orders", "--add-config", "no.such.config=1")
    assert done.returncode == 1 and "no.such.config" in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = run(kjbod_server, "--describe", "--topic", "missing")
    assert done.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in done.stderr, done.stderr


def test_broker_configs_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    done = run(kjbod_server, "--alter", "--broker", "1", "--add-config", "log.retention.ms=7200000")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for broker 1.\n"), done.stderr
    done = run(kjbod_server, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
               "log.cleaner.threads=2")
    assert (done.returncode, done.stdout) == (0, "Completed updating default config for brokers in the cluster.\n")
    done = run(kjbod_server, "--describe", "--entity-type", "brokers")
    lines = done.stdout.splitlines()
    assert lines[0] == "Dynamic configs for broker 1 are:", done.stderr
    assert lines[1].startswith("  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
                               "log.retention.ms=7200000"), lines
    at = lines.index("Default configs for brokers in the cluster are:")
    assert lines[at + 1].startswith("  log.cleaner.threads=2 sensitive=false synonyms={"
                                    "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2"), lines
    done = run(kjbod_server, "--alter", "--broker", "1", "--delete-config", "log.retention.ms")
    assert done.returncode == 0, done.stderr
    assert run(kjbod_server, "--describe", "--broker", "1").stdout == "Dynamic configs for broker 1 are:\n"
    done = run(kjbod_server, "--alter", "--broker", "1", "--delete-config", "log.retention.ms")
    assert (done.returncode, done.stderr) == (1, "Invalid config(s): log.retention.ms\n")
    done = run(kjbod_server, "--alter", "--broker", "1", "--add-config", "log.dirs=/elsewhere")
    assert done.returncode == 1 and "log.dirs" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_broker_loggers_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    from kafka import KafkaProducer

    done = run(kjbod_server, "--describe", "--broker-logger", "1")
    lines = done.stdout.splitlines()
    assert lines[0] == "Dynamic configs for broker-logger 1 are:", done.stderr
    names = [line.split("=")[0] for line in lines[1:]]
    assert names == sorted(names)  # by name, as the tool prints them
    assert "  root=INFO sensitive=false synonyms={}" in lines
    assert "  kjbod.storage.log=INFO sensitive=false synonyms={}" in lines
    assert "  kjbod.storage=INFO sensitive=false synonyms={}" in lines  # a parent of loggers is one too

    done = run(kjbod_server, "--alter", "--broker-logger", "1", "--add-config", "kjbod.storage=DEBUG")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for broker-logger 1.\n"), done.stderr
    lines = run(kjbod_server, "--describe", "--broker-logger", "1").stdout.splitlines()
    assert "  kjbod.storage=DEBUG sensitive=false synonyms={}" in lines
    assert "  kjbod.storage.log=DEBUG sensitive=false synonyms={}" in lines  # taken from its parent
    assert "  kjbod.server=INFO sensitive=false synonyms={}" in lines

    # It takes hold: a segment roll (a debug event of kjbod.storage.log) is now in the broker's log.
    made = topics(kjbod_server, "--create", "--topic", "rolling", "--partitions", "1", "--config", "segment.bytes=200")
    assert made.returncode == 0, made.stderr
    producer = KafkaProducer(bootstrap_servers=kjbod_server.bootstrap, acks=1, linger_ms=0)
    for _ in range(20):
        producer.send("rolling", b"x" * 100, partition=0).get(timeout=30)
    producer.close()
    assert '"segment_rolled"' in kjbod_server.stderr(tail=2000)

    done = run(kjbod_server, "--alter", "--broker-logger", "1", "--delete-config", "kjbod.storage")
    assert done.returncode == 0, done.stderr
    assert "  kjbod.storage.log=INFO sensitive=false synonyms={}" in run(
        kjbod_server, "--describe", "--broker-logger", "1").stdout.splitlines()

    # Refusals: the tool's own check of the logger names, then the broker's answers.
    done = run(kjbod_server, "--alter", "--broker-logger", "1", "--add-config", "no.such.logger=DEBUG")
    assert (done.returncode, done.stderr) == (1, "Invalid broker logger(s): no.such.logger\n")
    done = run(kjbod_server, "--alter", "--broker-logger", "1", "--add-config", "kjbod.storage=LOUD")
    assert done.returncode == 1 and ("Cannot set the log level of kjbod.storage to LOUD as it is not a supported log "
                                     "level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN") in done.stderr
    done = run(kjbod_server, "--alter", "--broker-logger", "1", "--delete-config", "root")
    assert done.returncode == 1 and "Removing the log level of the root logger is not allowed" in done.stderr
    done = run(kjbod_server, "--describe", "--broker-logger", "7")
    assert (done.returncode, done.stderr) == (1, "Error while executing config command: BROKER_NOT_AVAILABLE: broker 7 "
                                                 "is not in the cluster metadata\n")


def test_broker_logger_requests_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    """What the tool does not check itself, asked raw: APPEND, validate_only, the legacy AlterConfigs."""
    import asyncio

    from kjbod.admin import AdminClient
    from kjbod.admin.types import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType
    from kjbod.protocol.errors import ErrorCode

    loggers = ConfigResource(ConfigResourceType.BROKER_LOGGER, "1")

    async def go() -> None:
        client = AdminClient(kjbod_server.bootstrap)
        await client.start()
        try:
            results = await client.incremental_alter_configs(
                {loggers: [AlterConfigOp("kjbod.server", "WARN", AlterConfigOpType.APPEND)]}, raise_on_error=False)
            error = results[loggers].error
            assert error is not None and error.code == ErrorCode.INVALID_REQUEST
            assert "APPEND operation is not allowed for the BROKER_LOGGER resource" in str(error)
            # One bad operation refuses the resource's others too: nothing is applied.
            results = await client.incremental_alter_configs(
                {loggers: [AlterConfigOp("kjbod.server", "WARN"), AlterConfigOp("nope", "WARN")]},
                raise_on_error=False)
            assert results[loggers].error is not None and "Logger nope does not exist!" in str(results[loggers].error)
            await client.incremental_alter_configs({loggers: [AlterConfigOp("kjbod.server", "ERROR")]},
                                                   validate_only=True)
            described = (await client.describe_configs([loggers], keys=["kjbod.server", "root"]))[loggers]
            assert {k: e.value for k, e in described.items()} == {"kjbod.server": "INFO", "root": "INFO"}
        finally:
            await client.close()

    asyncio.run(go())


def test_client_metrics_configs_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    done = run(kjbod_server, "--alter", "--entity-type", "client-metrics", "--entity-name", "producers",
               "--add-config", "metrics=[org.apache.kafka.producer.,org.apache.kafka.consumer.],interval.ms=5000")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for client-metric producers.\n"), (
        done.stderr)
    done = run(kjbod_server, "--describe", "--entity-type", "client-metrics")
    assert done.stdout.splitlines()[:3] == [
        "Dynamic configs for client-metric producers are:",
        "  interval.ms=5000 sensitive=false synonyms={}",
        "  metrics=org.apache.kafka.producer.,org.apache.kafka.consumer. sensitive=false synonyms={}"], done.stderr
    done = run(kjbod_server, "--alter", "--entity-type", "client-metrics", "--entity-name", "producers",
               "--delete-config", "match")
    assert (done.returncode, done.stderr) == (1, "Invalid config(s): match\n")
