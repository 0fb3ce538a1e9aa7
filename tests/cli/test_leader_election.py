"""`kjbod leader-election`'s options and JSON file as kafka-leader-election.sh reads them (the live runs are in
tests/cluster/test_replication_live.py, on a cluster where a broker lost and gets back its leadership)."""

from __future__ import annotations

import pytest

from kjbod.cli.leader_election import _check, parse_election_json
from kjbod.cli.main import UserError, build_parser


def checked(*argv: str):
    return _check(build_parser().parse_args(["leader-election", *argv]))


def test_options() -> None:
    assert checked("--bootstrap-server", "h:1", "--election-type", "Preferred", "--all-topic-partitions") == (0, None)
    assert checked("--bootstrap-server", "h:1", "--election-type", "unclean", "--topic", "t", "--partition", "3") == (
        1, [("t", 3)])


@pytest.mark.parametrize(("argv", "message"), [
    (("--all-topic-partitions",), "Missing required option(s): bootstrap-server, election-type"),
    (("--bootstrap-server", "h:1", "--all-topic-partitions"), "Missing required option(s): election-type"),
    (("--bootstrap-server", "h:1", "--election-type", "fastest", "--all-topic-partitions"), "not one of preferred"),
    (("--bootstrap-server", "h:1", "--election-type", "preferred"), "One and only one of the following options"),
    (("--bootstrap-server", "h:1", "--election-type", "preferred", "--all-topic-partitions", "--topic", "t",
      "--partition", "0"), "One and only one of the following options"),
    (("--bootstrap-server", "h:1", "--election-type", "preferred", "--topic", "t"),
     "Missing required option(s): partition"),
    (("--bootstrap-server", "h:1", "--election-type", "preferred", "--all-topic-partitions", "--partition", "1"),
     "Option partition is only allowed if topic is used"),
    (("--bootstrap-server", "h:1", "--election-type", "preferred", "--path-to-json-file", "/nonexistent/x.json"),
     "--path-to-json-file"),
])
def test_option_mistakes(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError) as raised:
        checked(*argv)
    assert message in str(raised.value)


def test_json_file() -> None:
    assert parse_election_json('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}]}') == [
        ("a", 1), ("b", 0)]
    for text, message in [
        ("{}", "Replica election data is empty"),
        ('{"version": 1}', 'Replica election data is missing "partitions" field'),
        ('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]}',
         "Replica election data contains duplicate partitions: a-1"),
        ('{"partitions": [{"topic": "a", "partition": "1"}]}', 'partitions[0]: needs a string "topic"'),
        ("not json", "not valid JSON"),
    ]:
        with pytest.raises(UserError) as raised:
            parse_election_json(text)
        assert message in str(raised.value)
