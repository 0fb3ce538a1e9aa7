"""Client quotas on a cluster of separate processes (`kjbod cluster up`: a controller and two brokers): an
AlterClientQuotas sent to one broker is forwarded to the controller, every broker learns the quota from the
metadata log (DescribeClientQuotas on each answers it), and the other broker enforces it."""

from __future__ import annotations

import pytest

from kjbod.protocol.generated import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kjbod.protocol.generated.alter_client_quotas_request import EntityData, EntryData, OpData
from kjbod.protocol.generated.describe_client_quotas_request import ComponentData
from tests.cluster.conftest import running_cluster, wait_for
from tests.datapath.support import RawClient

pytestmark = [pytest.mark.slow]


def _describe(port: int) -> list:
    with RawClient("127.0.0.1", port) as raw:
        resp = raw.call(DescribeClientQuotasRequest(components=[
            ComponentData(entity_type="client-id", match_type=0, match="capped")], strict=True), 1)
    assert resp.error_code == 0, resp.error_message
    return [[(v.key, v.value) for v in e.values] for e in resp.entries]


def test_a_quota_set_through_one_broker_is_known_and_enforced_by_every_broker(tmp_path) -> None:
    with running_cluster(tmp_path / "cluster", brokers=2, log_dirs=1) as cluster:
        first, second = cluster.broker_ids
        with RawClient("127.0.0.1", cluster.broker_port(first)) as raw:
            resp = raw.call(AlterClientQuotasRequest(entries=[EntryData(
                entity=[EntityData(entity_type="client-id", entity_name="capped")],
                ops=[OpData(key="request_percentage", value=0.0001, remove=False)])]), 1)
        assert [(e.error_code, e.error_message) for e in resp.entries] == [(0, None)]
        for broker in (first, second):
            wait_for(lambda b=broker: _describe(cluster.broker_port(b)) == [[("request_percentage", 0.0001)]],
                     f"broker {broker} describes the quota")
        # A request of the capped client on the other broker comes back throttled; another client's does not.
        for client_id, throttled in (("capped", True), ("free", False)):
            with RawClient("127.0.0.1", cluster.broker_port(second), client_id=client_id) as raw:
                resp = raw.call(DescribeClientQuotasRequest(components=[], strict=False), 1)
            assert (resp.throttle_time_ms > 0) is throttled, (client_id, resp.throttle_time_ms)
