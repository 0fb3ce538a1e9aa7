"""server.properties parsing and checking: Kafka's keys and defaults, and errors naming key, value and place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kjbod.server.config import (
    LONG_MAX,
    ConfigError,
    Listener,
    build_config,
    load_config,
    parse_overrides,
    parse_properties,
)

REPO = Path(__file__).resolve().parent.parent

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a,/data/b",
}


def build(**changes: str | None) -> object:
    props = dict(BASE)
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    return build_config(props)


def config_error(**changes: str | None) -> str:
    with pytest.raises(ConfigError) as info:
        build(**changes)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- the properties format -------------------------------------------------------------------------------------


def test_parse_properties_like_java() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "plain=value\n"
        "  spaced   =   value with spaces   \n"
        "colon: v\n"
        "blank separated\n"
        "continued=one,\\\n"
        "          two,\\\n"
        "   three\n"
        "escaped\\=key=x\n"
        "unicode=caf\\u00e9\\tTab\n"
        "backslash=C:\\\\dir\n"
        "empty=\n"
        "plain=later wins\n"
    )
    entries = parse_properties(text)
    assert [(k, v) for _, k, v in entries] == [
        ("plain", "value"),
        ("spaced", "value with spaces"),
        ("colon", "v"),
        ("blank", "separated"),
        ("continued", "one,two,three"),
        ("escaped=key", "x"),
        ("unicode", "café\tTab"),
        ("backslash", "C:\\dir"),
        ("empty", ""),
        ("plain", "later wins"),
    ]
    assert [n for n, _, _ in entries][:5] == [4, 5, 6, 7, 8]


def test_even_backslashes_do_not_continue() -> None:
    assert [(k, v) for _, k, v in parse_properties("a=x\\\\\nb=y\n")] == [("a", "x\\"), ("b", "y")]


def test_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_properties("a=1\nb=\\u12\n")


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b = x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(ConfigError, match="'novalue'"):
        parse_overrides(["novalue"])


# -- defaults and conversions ---------------------------------------------------------------------------------------


def test_kafka_defaults() -> None:
    c = build()
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.log_segment_bytes == 1073741824
    assert c.log_roll_ms == 168 * 3_600_000
    assert c.log_retention_ms == 168 * 3_600_000
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300_000
    assert c.message_max_bytes == 1048588
    assert c.log_index_interval_bytes == 4096
    assert c.log_index_size_max_bytes == 10485760
    assert c.log_flush_interval_messages == LONG_MAX
    assert c.log_flush_interval_ms == LONG_MAX
    assert c.log_segment_delete_delay_ms == 60_000
    assert c.log_flush_offset_checkpoint_interval_ms == 60_000
    assert c.replica_alter_log_dirs_io_max_bytes_per_second == LONG_MAX
    assert c.num_replica_alter_log_dirs_threads == 2  # the number of log dirs
    assert c.log_dir_failure_timeout_ms == 30_000
    assert c.socket_request_max_bytes == 104857600
    assert c.broker_heartbeat_interval_ms == 2000
    assert c.broker_session_timeout_ms == 9000
    assert c.replica_fetch_max_bytes == 1048576
    assert c.fetch_max_bytes == 57671680  # 55 MiB
    assert c.log_dir_placement_policy == "most-usable"
    assert c.zero_copy is True
    assert c.listener_security_protocol_map["SSL"] == "SSL"


def test_values_are_converted() -> None:
    c = build(
        num__partitions="12",
        auto__create__topics__enable="FALSE",
        log__segment__bytes=" 1048576 ",
        log__dir__placement__policy="fewest-partitions",
        kjbod__zero__copy="false",
        log__flush__interval__ms="1000",
        num__replica__alter__log__dirs__threads="7",
        fetch__max__bytes="1024",
    )
    assert c.num_partitions == 12
    assert c.auto_create_topics_enable is False
    assert c.log_segment_bytes == 1048576
    assert c.log_dir_placement_policy == "fewest-partitions"
    assert c.zero_copy is False
    assert c.log_flush_interval_ms == 1000
    assert c.num_replica_alter_log_dirs_threads == 7
    assert c.fetch_max_bytes == 1024


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("num.partitions", "0", "an integer >= 1"),
        ("num.partitions", "three", "an integer >= 1"),
        ("num.partitions", "1e3", "an integer >= 1"),
        ("node.id", "-1", "an integer >= 0"),
        ("log.segment.bytes", "13", "an integer >= 14"),
        ("log.segment.bytes", "4294967296", "an integer >= 14"),  # does not fit Kafka's int
        ("socket.request.max.bytes", "0", "an integer >= 1"),
        ("fetch.max.bytes", "1023", "an integer >= 1024"),  # Kafka's atLeast(1024)
        ("fetch.max.bytes", "2147483648", "an integer >= 1024"),  # does not fit Kafka's int
        ("auto.create.topics.enable", "yes", "true or false"),
        ("kjbod.zero.copy", "1", "true or false"),
        ("log.dir.placement.policy", "random", "most-usable or fewest-partitions"),
        ("process.roles", "worker", "broker, controller, or broker,controller"),
        ("process.roles", "broker,broker", "broker, controller, or broker,controller"),
        ("default.replication.factor", "40000", "between 1 and 32767"),
        ("log.cleanup.policy", "shred", "a list of delete and compact"),
    ],
)
def test_bad_value_names_key_value_and_expectation(key: str, value: str, expected: str) -> None:
    message = config_error(**{key.replace(".", "__"): value})
    assert key in message
    assert repr(value) in message
    assert expected in message


@pytest.mark.parametrize(
    ("listeners", "fragment"),
    [
        ("PLAINTEXT:/127.0.0.1:9092", "expected NAME://host:port"),
        ("PLAINTEXT://127.0.0.1", "expected NAME://host:port"),
        ("PLAINTEXT://127.0.0.1:70000", "port 70000"),
        ("PLAINTEXT://a:1,PLAINTEXT://b:2", "appears twice"),
    ],
)
def test_bad_listeners(listeners: str, fragment: str) -> None:
    assert fragment in config_error(listeners=listeners)


def test_unknown_key_names_it_and_suggests() -> None:
    message = config_error(log__dri="/x")
    assert "'log.dri'" in message
    assert "did you mean log.dir?" in message
    message = config_error(**{"completely.unrelated": "1"})
    assert "'completely.unrelated'" in message and "did you mean" not in message


def test_required_keys() -> None:
    assert "node.id is required" in config_error(node__id=None)
    assert "process.roles is required" in config_error(process__roles=None)
    assert "controller.listener.names is required" in config_error(controller__listener__names=None)


def test_accepted_kafka_keys_have_no_effect() -> None:
    c = build(background__threads="4", num__network__threads="8")
    assert dict(c.ignored) == {"background.threads": "4", "num.network.threads": "8"}
    # share.coordinator.state.topic.min.isr was one of them until the share coordinator read it
    assert "share.coordinator.state.topic.min.isr" not in build(share__coordinator__state__topic__min__isr="2").ignored


# -- aliases and precedence ---------------------------------------------------------------------------------------


def test_throttle_alias() -> None:
    c = build(intra__broker__throttled__rate="1048576")
    assert c.replica_alter_log_dirs_io_max_bytes_per_second == 1048576
    same = build(
        intra__broker__throttled__rate="5", replica__alter__log__dirs__io__max__bytes__per__second="5"
    )
    assert same.replica_alter_log_dirs_io_max_bytes_per_second == 5
    message = config_error(
        intra__broker__throttled__rate="5", replica__alter__log__dirs__io__max__bytes__per__second="6"
    )
    assert (
        "intra.broker.throttled.rate" in message
        and "replica.alter.log.dirs.io.max.bytes.per.second" in message
    )


def test_broker_id_alias() -> None:
    assert build(node__id=None, broker__id="4").node_id == 4
    assert "disagrees" in config_error(broker__id="2")


def test_retention_precedence() -> None:
    assert build(log__retention__hours="1").log_retention_ms == 3_600_000
    assert build(log__retention__hours="1", log__retention__minutes="2").log_retention_ms == 120_000
    assert build(log__retention__minutes="2", log__retention__ms="5").log_retention_ms == 5
    assert build(log__retention__hours="-1").log_retention_ms == -1
    assert build(log__retention__minutes="-1").log_retention_ms == -1
    assert build(log__retention__ms="-1").log_retention_ms == -1


def test_roll_precedence() -> None:
    assert build(log__roll__hours="2").log_roll_ms == 7_200_000
    assert build(log__roll__hours="2", log__roll__ms="1234").log_roll_ms == 1234


# -- log dirs -----------------------------------------------------------------------------------------------------


def test_log_dirs_wins_over_log_dir() -> None:
    c = build(log__dir="/other")
    assert c.log_dirs == ("/data/a", "/data/b")
    assert build(log__dirs=None, log__dir="/only").log_dirs == ("/only",)
    assert build(log__dirs=None).log_dirs == ("/tmp/kraft-combined-logs",)


def test_relative_log_dirs_resolve_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = build(log__dirs="./a, b/../c ,d/", metadata__log__dir="meta")
    cwd = os.getcwd()
    assert c.log_dirs == (f"{cwd}/a", f"{cwd}/c", f"{cwd}/d")
    assert c.metadata_log_dir == f"{cwd}/meta"
    assert all(os.path.isabs(d) for d in c.log_dirs)


def test_metadata_log_dir_defaults_to_first_log_dir() -> None:
    assert build().metadata_log_dir == "/data/a"


@pytest.mark.parametrize("dirs", ["/data/a,/data/a", "/data/a,/data/./a/", "/data/a,/data/b/../a"])
def test_duplicate_log_dirs_refused(dirs: str) -> None:
    message = config_error(log__dirs=dirs)
    assert "/data/a is listed twice" in message


def test_nested_log_dirs_refused() -> None:
    assert "/data/a/b is inside log dir /data/a" in config_error(log__dirs="/data/a,/data/a/b")
    assert "nested" in config_error(metadata__log__dir="/data/a/meta")


# -- roles and listeners ---------------------------------------------------------------------------------------------


def test_listeners_and_kinds() -> None:
    c = build(listeners="plaintext://127.0.0.1:9092,controller://[::1]:9093")
    assert c.listeners == (
        Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        Listener("CONTROLLER", "::1", 9093, "PLAINTEXT"),
    )
    assert c.listener_kind("PLAINTEXT") == "broker"
    assert c.listener_kind("CONTROLLER") == "controller"
    assert [ln.name for ln in c.broker_listeners] == ["PLAINTEXT"]
    assert [ln.name for ln in c.controller_listeners] == ["CONTROLLER"]
    assert str(c.listeners[1]) == "CONTROLLER://[::1]:9093"
    assert build(listeners="PLAINTEXT://:9092,CONTROLLER://:9093").listeners[0].host == "0.0.0.0"


def test_custom_listener_names_need_a_protocol() -> None:
    message = config_error(listeners="INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093")
    assert "INTERNAL" in message and "listener.security.protocol.map" in message
    c = build(
        listeners="PLAINTEXT://127.0.0.1:9092,CTRL://127.0.0.1:9093",
        controller__listener__names="CTRL",  # a controller listener missing from the default map is PLAINTEXT
        listener__security__protocol__map=None,
    )
    assert c.listener_kind("CTRL") == "controller"
    assert "INTERNAL" in config_error(
        listeners="INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        listener__security__protocol__map="CONTROLLER:PLAINTEXT",
    )


def test_sasl_needs_a_served_mechanism_and_tls_needs_a_keystore() -> None:
    # Kafka's default mechanism is GSSAPI, which kjbod does not serve: the message says what to set
    message = config_error(listeners="SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093")
    assert "sasl.enabled.mechanisms" in message and "GSSAPI" in message and "PLAIN" in message
    message = config_error(listeners="SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
                           sasl__enabled__mechanisms="PLAIN")
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in message
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'
    c = build(listeners="PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
              sasl__enabled__mechanisms="PLAIN", **{"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert c.security_protocol("SASL_PLAINTEXT") == "SASL_PLAINTEXT"
    assert c.sasl_settings("SASL_PLAINTEXT").users("PLAIN") == {"alice": "pw"}
    # SASL on the inter-broker listener: this node's own username and password must be there
    message = config_error(listeners="SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
                           inter__broker__listener__name="SASL_PLAINTEXT", sasl__enabled__mechanisms="PLAIN",
                           sasl__mechanism__inter__broker__protocol="PLAIN",
                           **{"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert "username" in message and "listener.name.sasl_plaintext.plain.sasl.jaas.config" in message
    # TLS listeners are served (tests/security); without a certificate and key one cannot start
    message = config_error(listeners="SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093")
    assert "listener SSL" in message and "ssl.keystore.location" in message
    assert "unknown security protocol" in config_error(listener__security__protocol__map="PLAINTEXT:TLS")


def test_same_port_twice_refused() -> None:
    assert "both use 127.0.0.1:9092" in config_error(
        listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9092"
    )
    build(
        listeners="PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
    )  # port 0: any free port, twice is fine


def test_role_rules() -> None:
    # combined: the controller listener must be there
    assert "process.roles includes controller" in config_error(listeners="PLAINTEXT://127.0.0.1:9092")
    # controller only: nothing but controller listeners
    assert "controller-only" in config_error(process__roles="controller")
    c = build(process__roles="controller", listeners="CONTROLLER://127.0.0.1:9093")
    assert not c.is_broker and c.is_controller
    # broker only: no controller listener, and a way to find the controller
    assert "does not include controller" in config_error(process__roles="broker")
    assert "controller.quorum.bootstrap.servers" in config_error(
        process__roles="broker", listeners="PLAINTEXT://127.0.0.1:9092"
    )
    c = build(
        process__roles="broker",
        listeners="PLAINTEXT://127.0.0.1:9092",
        controller__quorum__bootstrap__servers="127.0.0.1:9093",
    )
    assert c.is_broker and not c.is_controller
    assert c.controller_quorum_bootstrap_servers == ("127.0.0.1:9093",)
    c = build(
        process__roles="broker", listeners="PLAINTEXT://h:1", controller__quorum__voters="1@localhost:9093"
    )
    assert c.controller_quorum_voters == ("1@localhost:9093",)
    assert "id@host:port" in config_error(controller__quorum__voters="localhost:9093")
    assert "host:port" in config_error(controller__quorum__bootstrap__servers="localhost")


def test_several_voters_make_a_quorum_of_controller_only_nodes() -> None:
    three = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
    controller = {"process__roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093"}
    assert build(**controller, controller__quorum__voters=three).controller_quorum_voters == tuple(three.split(","))
    # a combined node runs its controller alone; a controller must be one of the voters
    message = config_error(controller__quorum__voters=three)
    assert "controller.quorum.voters lists 3 voters" in message and "process.roles=controller" in message
    message = config_error(**controller, node__id="4", controller__quorum__voters=three)
    assert "node.id 4 is not one of controller.quorum.voters" in message
    # one voter (this controller) as before; a broker may list every controller's address
    assert build(controller__quorum__voters="1@127.0.0.1:9093").controller_quorum_voters == ("1@127.0.0.1:9093",)
    broker = build(process__roles="broker", listeners="PLAINTEXT://127.0.0.1:9092", controller__quorum__voters=three)
    assert len(broker.controller_quorum_voters) == 3


def test_advertised_listeners() -> None:
    c = build(advertised__listeners="PLAINTEXT://kafka-1.example:9092")
    assert c.advertised_listeners == (Listener("PLAINTEXT", "kafka-1.example", 9092, "PLAINTEXT"),)
    assert build().advertised_listeners == ()
    assert "not in listeners" in config_error(advertised__listeners="OTHER://h:1")
    assert "routable" in config_error(advertised__listeners="PLAINTEXT://0.0.0.0:9092")


def test_inter_broker_listener_name() -> None:
    assert build(inter__broker__listener__name="plaintext").inter_broker_listener_name == "PLAINTEXT"
    assert "not one of the broker listeners" in config_error(inter__broker__listener__name="CONTROLLER")


# -- files and overrides ---------------------------------------------------------------------------------------


def test_load_config_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in BASE.items()) + "num.partitions=2\n")
    c = load_config(str(path), ["num.partitions=5", "log.segment.bytes=1048576"])
    assert c.num_partitions == 5
    assert c.log_segment_bytes == 1048576
    assert c.properties["num.partitions"] == "5"
    assert load_config(str(path), {"num.partitions": "9"}).num_partitions == 9


def test_errors_point_at_the_file_line_or_the_override(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in BASE.items()) + "# comment\nnum.partitions=zero\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(info.value).startswith(f"{path}:7: invalid value 'zero' for num.partitions")
    with pytest.raises(ConfigError) as info:
        load_config(str(path), ["num.partitions=1", "log.segmnet.bytes=5"])
    assert str(info.value).startswith("--override: unknown config key 'log.segmnet.bytes'")
    assert "did you mean log.segment.bytes?" in str(info.value)


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.properties"))
    (tmp_path / "binary.properties").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(str(tmp_path / "binary.properties"))


def test_the_repos_default_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    c = load_config("config/server.properties")
    assert c.node_id == 1
    assert c.process_roles == ("broker", "controller")
    assert [str(ln) for ln in c.listeners] == ["PLAINTEXT://127.0.0.1:9092", "CONTROLLER://127.0.0.1:9093"]
    assert c.controller_listener_names == ("CONTROLLER",)
    assert c.log_dirs == tuple(str(REPO / "data" / f"logs-{i}") for i in (1, 2, 3))
    assert c.metadata_log_dir == str(REPO / "data" / "metadata")
    assert c.num_partitions == 3


def test_a_heartbeat_interval_above_the_session_timeout_is_refused_naming_both() -> None:
    message = config_error(broker__heartbeat__interval__ms="5000", broker__session__timeout__ms="3000")
    assert "broker.heartbeat.interval.ms (5000)" in message and "broker.session.timeout.ms (3000)" in message
    ok = build(broker__heartbeat__interval__ms="3000", broker__session__timeout__ms="3000")
    assert ok.broker_heartbeat_interval_ms == ok.broker_session_timeout_ms == 3000  # type: ignore[attr-defined]


def test_replica_selector_class_takes_kafkas_rack_aware_selector_only() -> None:
    from kjbod.server.config import RACK_AWARE_REPLICA_SELECTOR

    assert build_config(BASE).replica_selector_class == ""  # Kafka's default: consumers read from leaders
    chosen = build_config({**BASE, "replica.selector.class": f" {RACK_AWARE_REPLICA_SELECTOR} "})
    assert chosen.replica_selector_class == RACK_AWARE_REPLICA_SELECTOR
    with pytest.raises(ConfigError, match=r"replica.selector.class=com.example.Nearest is not served: kjbod's "
                                          r"replica selector is org.apache.kafka.common.replica.RackAwareReplicaSelector"):
        build_config({**BASE, "replica.selector.class": "com.example.Nearest"})
