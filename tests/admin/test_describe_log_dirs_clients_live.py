"""DescribeLogDirs from a real `kjbod serve` as other clients read it: the directory-id extension is opt-in, so a
request that does not ask (every Kafka client) gets Kafka's response, which kio 0.6.5 (strict: it refuses any
unknown tagged field) and kafka-python decode; kjbod's own client asks and gets the ids (test_admin_live).

confluent-kafka's Python AdminClient has no DescribeLogDirs (librdkafka does not implement it), so it has
nothing to decode here."""

from __future__ import annotations

import struct
import warnings

import pytest
from datapath.support import RawClient
from live import kafka_uuid, read_meta_properties
from protocol.test_cross_impl import kio_class, kio_decode, kp_class, kp_decode

from kjbod.protocol.generated import DescribeLogDirsRequest, DescribeLogDirsResponse
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import response_header_version
from kjbod.protocol.runtime import ZERO_UUID

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient


def raw_answer(raw: RawClient, request: DescribeLogDirsRequest, version: int) -> bytes:
    """The response body exactly as the server wrote it."""
    corr = raw.send(request, version)
    (size,) = struct.unpack(">i", raw._read_exact(4))  # noqa: SLF001 - the bytes, not kjbod's decoding of them
    frame = raw._read_exact(size)  # noqa: SLF001
    header, pos = ResponseHeader.decode_from(frame, 0, response_header_version(35, version))
    assert header.correlation_id == corr
    return frame[pos:]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_strict_decoders_read_describe_log_dirs_that_did_not_ask(kjbod_server, version):
    ids = {str(p): kafka_uuid(read_meta_properties(p)["directory.id"]) for p in kjbod_server.log_dirs}
    with RawClient.to(kjbod_server) as raw:
        plain = raw_answer(raw, DescribeLogDirsRequest(topics=None), version)
        asked = raw_answer(raw, DescribeLogDirsRequest(topics=None, include_directory_ids=True), version)
    assert not any(i.bytes in plain for i in ids.values())
    # kio (strict) and kafka-python read the plain answer: every configured dir, no error.
    kio_obj = kio_decode(kio_class(DescribeLogDirsResponse, version), plain)
    kp_obj = kp_decode(kp_class(DescribeLogDirsResponse, version), DescribeLogDirsResponse, plain, version)
    assert sorted(r.log_dir for r in kio_obj.results) == sorted(ids)
    assert sorted(r.log_dir for r in kp_obj.results) == sorted(ids)
    assert all(not getattr(r, "unknown_tags", None) for r in kp_obj.results)
    # The answer to a request that asks carries the ids, which kjbod reads and kio refuses (any unknown tag).
    ours = DescribeLogDirsResponse.decode(asked, version)
    assert {r.log_dir: r.directory_id for r in ours.results} == ids
    assert {r.log_dir: r.directory_id for r in DescribeLogDirsResponse.decode(plain, version).results} == \
        dict.fromkeys(ids, ZERO_UUID)
    with pytest.raises(KeyError):
        kio_decode(kio_class(DescribeLogDirsResponse, version), asked)


def test_kafka_python_admin_describes_log_dirs(kjbod_server):
    admin = KafkaAdminClient(bootstrap_servers=kjbod_server.bootstrap, request_timeout_ms=30000)
    try:
        answer = admin.describe_log_dirs()
    finally:
        admin.close()
    text = repr(answer)
    assert all(str(p) in text for p in kjbod_server.log_dirs)
