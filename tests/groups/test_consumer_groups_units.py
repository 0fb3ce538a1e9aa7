"""`kjbod consumer-groups` without a cluster: Kafka's option rules and messages, the time and topic arguments,
and the tables byte for byte (Kafka's column widths, "-" for a missing value, the blank line before a table)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kjbod.admin import GroupListing, MemberDescription
from kjbod.cli.consumer_groups import (
    OffsetRow,
    list_table,
    members_table,
    offsets_table,
    parse_datetime,
    parse_duration,
    parse_reset_plan,
    parse_topic_partitions,
    reset_table,
    state_table,
)
from kjbod.cli.main import main

NOWHERE = ["consumer-groups", "--bootstrap-server", "127.0.0.1:9"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets"),
    (["--list", "--describe", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
    (["--describe"], "Option [describe] takes one of these options: [group], [all-groups]"),
    (["--describe", "--group", "g", "--members", "--state"],
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] does not take a value for [state]"),
    (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
    (["--describe", "--group", "g", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[describe]"'),
    (["--list", "--members"], "Option(s) [members] are unavailable given other options on the command line"),
    (["--describe", "--group", "g", "--type"],
     "Option(s) [type] are unavailable given other options on the command line"),
    (["--delete"], "Option [delete] takes one of these options: [group], [all-groups]"),
    (["--delete", "--group", "g", "--topic", "t"],
     "The consumer does not support topic-specific offset deletion from a consumer group."),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"],
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--all-topics", "--to-earliest"],
     "Option [reset-offsets] takes one of these options: [group], [all-groups]"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-offset", "3", "--shift-by", "1"],
     'Option "[to-offset]" can\'t be used with option "[shift-by]"'),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
     'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2024-13-01T00:00:00.000"],
     "Unparseable date: '2024-13-01T00:00:00.000'"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
     "Error parsing timestamp 'yesterday': it does not contain a 'T'"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1 hour"],
     "Text cannot be parsed to a Duration: '1 hour'"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
     "Invalid partition 'x' specified in topic arg 't:x'"),
    (["--list", "--state", "Stable,Sleepy"],
     "Invalid state list 'Stable,Sleepy'. Valid states are: PreparingRebalance, CompletingRebalance, Stable, Dead, "
     "Empty, Assigning, Reconciling"),
    (["--list", "--type", "modern"], "Invalid types list 'modern'. Valid types are: Consumer, Classic, Share"),
    (["--reset-offsets", "--group", "g", "--to-current", "--from-file", "x.csv"],
     'Option "[to-current]" can\'t be used with option "[from-file]"'),
    (["--delete", "--group", "g", "--json"], "Option [json] can only be used with [list] or [describe]"),
])
def test_option_mistakes_get_the_kafka_tools_message_before_any_connection(args, message, capsys):
    assert main([*NOWHERE, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kjbod: error: ") and message in err and "Traceback" not in err


def test_an_unreachable_cluster_is_one_line(capsys):
    assert main([*NOWHERE, "--list", "--timeout", "500"]) == 2
    assert capsys.readouterr().err.startswith("kjbod: error: cannot reach the cluster: ")


def test_datetimes_are_utc_unless_they_say_otherwise():
    assert parse_datetime("1970-01-01T00:00:01.500") == 1500
    assert parse_datetime("1970-01-01T00:00:01.500Z") == 1500
    assert parse_datetime("1970-01-01T01:00:00.000+01:00") == 0
    assert parse_datetime("1970-01-01T00:00:00.000-0130") == 90 * 60 * 1000
    assert parse_datetime("2024-02-29T12:00:00.000") == 1709208000000


def test_durations_read_as_javas_duration_parse():
    assert parse_duration("PT1H30M") == timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT2S") == timedelta(days=1, seconds=2)
    assert parse_duration("PT0.5S") == timedelta(milliseconds=500)
    assert parse_duration("-PT10M") == -timedelta(minutes=10)
    for bad in ("P", "PT", "1H", "P1H", "PT1D"):
        with pytest.raises(Exception, match="cannot be parsed"):
            parse_duration(bad)


def test_topic_arguments():
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:0,2") == ("orders", [0, 2])
    with pytest.raises(Exception, match="expected topic name and partitions"):
        parse_topic_partitions("a:1:2")


def test_offsets_table_widths_and_missing_values():
    rows = [OffsetRow("g", "orders", 0, 4, 10, "m-1", "/127.0.0.1", "c"),
            OffsetRow("g", "orders", 1, None, 10, "-", "-", "-")]
    assert offsets_table(rows) == (
        "\n"
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     "
        "HOST            CLIENT-ID\n"
        "g               orders          0          4               10              6               m-1             "
        "/127.0.0.1      c\n"
        "g               orders          1          -               10              -               -               "
        "-               -\n")


def test_members_table_with_and_without_instance_ids():
    plain = [MemberDescription("m-1", None, "c", "/h", (("b", 1), ("a", 2), ("a", 0)))]
    assert members_table("g", plain, verbose=True) == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     ASSIGNMENT\n"
        "g               m-1             /h              c               3               a(0,2), b(1)\n")
    static = [MemberDescription("m-1", "i-1", "c", "/h", ())]
    assert members_table("g", static, verbose=False) == (
        "\nGROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS     \n"
        "g               m-1             i-1               /h              c               0               \n")


def test_state_list_and_reset_tables():
    assert state_table("g", "127.0.0.1:9092  (1)", "range", "Stable", 2) == (
        "\nGROUP                     COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS\n"
        "g                         127.0.0.1:9092  (1)       range                Stable          2\n")
    assert list_table([GroupListing("g", "consumer", "Empty", "classic")], True, True) == (
        "GROUP                     TYPE                 STATE               \n"
        "g                         Classic              Empty               \n")
    assert reset_table({"g": {("t", 1): 5, ("t", 0): 3}}) == (
        "\nGROUP                          TOPIC                          PARTITION  NEW-OFFSET     "
        "\ng                              t                              0          3              "
        "\ng                              t                              1          5              \n")
    assert reset_table({}) == "\n"


def test_command_config_is_read_as_the_other_commands_read_it(tmp_path, capsys):
    missing = tmp_path / "missing.properties"
    assert main([*NOWHERE, "--list", "--command-config", str(missing)]) == 2
    assert f"--command-config: cannot read {missing}" in capsys.readouterr().err
    sasl = tmp_path / "sasl.properties"
    sasl.write_text("security.protocol=SASL_SSL\n")  # no sasl.mechanism: Kafka's default, GSSAPI, is not served
    assert main([*NOWHERE, "--list", "--command-config", str(sasl)]) == 2
    assert "'GSSAPI' in sasl.mechanism: a Kafka mechanism kjbod does not serve" in capsys.readouterr().err


def test_reset_plans_read_from_a_file():
    assert parse_reset_plan("t,0,5\nt,1,7\n", "g") == {"g": {("t", 0): 5, ("t", 1): 7}}
    assert parse_reset_plan("g,t,0,5\nh,t,0,1\n", None) == {"g": {("t", 0): 5}, "h": {("t", 0): 1}}
    assert parse_reset_plan("g,t,0,5\n", "g") == {"g": {("t", 0): 5}}  # the group column with one --group
    with pytest.raises(Exception, match="line 2: expected topic,partition,offset"):
        parse_reset_plan("t,0,5\nt,x,7\n", "g")
    with pytest.raises(Exception, match="line 1: expected group,topic,partition,offset"):
        parse_reset_plan("t,0,5\n", None)
