"""`kjbod delete-records` without a cluster: the offset file is read as kafka-delete-records.sh reads it, and
everything wrong with it is one line naming the problem (exit 2) before any connection is made.  The command
against a real cluster is in tests/cluster/test_admin_records_live.py."""

from __future__ import annotations

import json

import pytest

from kjbod.cli.delete_records import parse_offset_json
from kjbod.cli.main import UserError, main


def test_kafkas_format_in_the_files_order():
    text = json.dumps({"partitions": [{"topic": "b", "partition": 1, "offset": 7},
                                      {"topic": "a", "partition": 0, "offset": -1}], "version": 1})
    assert list(parse_offset_json(text).items()) == [(("b", 1), 7), (("a", 0), -1)]
    # No version: read as version 1, as Kafka's tool does.
    assert parse_offset_json('{"partitions": [{"topic": "t", "partition": 0, "offset": 3}]}') == {("t", 0): 3}


@pytest.mark.parametrize(("text", "problem"), [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"version": 1}', "missing partitions field"),
    ('{"partitions": [], "version": 2}', "not a supported version field value: 2"),
    ('{"partitions": {}, "version": 1}', "must be a list"),
    ('{"partitions": [7]}', "partitions[0] must be an object"),
    ('{"partitions": [{"partition": 0, "offset": 1}]}', "partitions[0]: topic"),
    ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}', "partitions[0]: partition"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": true}]}', "partitions[0]: offset"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]}',
     "duplicate topic partitions: t-0"),
])
def test_a_bad_file_is_named(text, problem):
    with pytest.raises(UserError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_offset_json(text)


def test_a_bad_file_ends_the_command_before_it_connects(tmp_path, capsys):
    path = tmp_path / "offsets.json"
    path.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 3}')
    # Port 9 (discard) has no broker: the command must stop at the file, not try to connect.
    code = main(["delete-records", "--bootstrap-server", "127.0.0.1:9", "--offset-json-file", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip() == "kjbod: error: not a supported version field value: 3 (only 1)"
    assert main(["delete-records", "--bootstrap-server", "127.0.0.1:9", "--offset-json-file",
                 str(tmp_path / "missing.json")]) == 2
    assert "No such file or directory" in capsys.readouterr().err
