"""`kjbod dump-log --cluster-metadata-decoder` on Kafka 4.3's metadata records kjbod lacked: each payload in the
JSON Kafka's MetadataRecordSerde prints (type constant, version, camelCase fields, a tagged field only when set)."""

from __future__ import annotations

import uuid
from pathlib import Path

from kjbod.cli.main import main
from kjbod.cli.record_json import metadata_record_json, uuid_text
from kjbod.protocol.generated import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
    RegisterControllerRecord,
    ZkMigrationStateRecord,
)
from kjbod.protocol.generated.register_controller_record import ControllerEndpoint, ControllerFeature
from kjbod.storage.metadata_log import TOPIC_DIR, MetadataLog

T = 1_700_000_000_000
INC = uuid.UUID("00000000-0000-0000-0000-000000000002")


def test_kafkas_json_for_the_records() -> None:
    assert metadata_record_json(NoOpRecord(), 0) == '{"type":"NO_OP_RECORD","version":0,"data":{}}'
    assert metadata_record_json(EndTransactionRecord(), 0) == '{"type":"END_TRANSACTION_RECORD","version":0,"data":{}}'
    assert metadata_record_json(BeginTransactionRecord(name="Bootstrap records"), 0) == (
        '{"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":"Bootstrap records"}}')
    assert metadata_record_json(BeginTransactionRecord(name=None), 0) == (
        '{"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{}}')  # a tagged field at its default is left out
    assert metadata_record_json(AbortTransactionRecord(reason="Controller failover"), 0) == (
        '{"type":"ABORT_TRANSACTION_RECORD","version":0,"data":{"reason":"Controller failover"}}')
    assert metadata_record_json(ZkMigrationStateRecord(zk_migration_state=1), 0) == (
        '{"type":"ZK_MIGRATION_STATE_RECORD","version":0,"data":{"zkMigrationState":1}}')
    rec = RegisterControllerRecord(
        controller_id=3001, incarnation_id=INC, zk_migration_ready=False,
        end_points=[ControllerEndpoint(name="CONTROLLER", host="c1", port=9093, security_protocol=0)],
        features=[ControllerFeature(name="kraft.version", min_supported_version=0, max_supported_version=1)])
    assert metadata_record_json(rec, 0) == (
        '{"type":"REGISTER_CONTROLLER_RECORD","version":0,"data":{"controllerId":3001,'
        f'"incarnationId":"{uuid_text(INC)}","zkMigrationReady":false,"endPoints":[{{"name":"CONTROLLER",'
        '"host":"c1","port":9093,"securityProtocol":0}],"features":[{"name":"kraft.version",'
        '"minSupportedVersion":0,"maxSupportedVersion":1}]}}')


def test_a_log_of_them_dumped(tmp_path: Path, capsys) -> None:
    mlog = MetadataLog(str(tmp_path), node_id=1, clock=lambda: T)
    mlog.load()
    mlog.append([BeginTransactionRecord(name="Bootstrap records"), NoOpRecord(), EndTransactionRecord(),
                 ZkMigrationStateRecord(zk_migration_state=0), AbortTransactionRecord(reason=None)])
    mlog.close()
    seg = tmp_path / TOPIC_DIR / "00000000000000000000.log"
    capsys.readouterr()
    assert main(["dump-log", "--files", str(seg), "--cluster-metadata-decoder"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| offset:")]
    prefix = f"CreateTime: {T} keySize: -1 valueSize:"
    assert lines[1:] == [
        f"| offset: 1 {prefix} 24 sequence: -1 headerKeys: [] payload: "
        '{"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":"Bootstrap records"}}',
        f"| offset: 2 {prefix} 4 sequence: -1 headerKeys: [] payload: "
        '{"type":"NO_OP_RECORD","version":0,"data":{}}',
        f"| offset: 3 {prefix} 4 sequence: -1 headerKeys: [] payload: "
        '{"type":"END_TRANSACTION_RECORD","version":0,"data":{}}',
        f"| offset: 4 {prefix} 5 sequence: -1 headerKeys: [] payload: "
        '{"type":"ZK_MIGRATION_STATE_RECORD","version":0,"data":{"zkMigrationState":0}}',
        f"| offset: 5 {prefix} 4 sequence: -1 headerKeys: [] payload: "
        '{"type":"ABORT_TRANSACTION_RECORD","version":0,"data":{}}',
    ]
