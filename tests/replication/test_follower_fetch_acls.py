"""A replica's Fetch with the authorizer on, in process through the router (frames in, reply bytes out): a
principal with CLUSTER_ACTION on the cluster (here a super user) is served, by the short way once its fetch's shape
is learned; any other principal's fetch answers every partition TOPIC_AUTHORIZATION_FAILED, as Kafka's, and the
short way never learns that connection, so a repeat is refused too."""

from __future__ import annotations

import dataclasses

from kjbod.metadata.acls import ALLOW, CLUSTER, CLUSTER_ACTION, LITERAL, AclEntry, Authorizer
from kjbod.protocol.errors import ErrorCode
from tests.replication.test_follower_fetch_fast import Leader, decoded


def authorizer(acls: dict) -> Authorizer:
    return Authorizer(lambda: acls, super_users=["User:broker"])


def test_only_a_principal_with_cluster_action_may_fetch_as_a_replica(make_log):
    lead = Leader(make_log, short=True)
    lead.append(2)
    acls: dict = {}
    lead.node.authorizer = authorizer(acls)
    lead.ctx[2] = dataclasses.replace(lead.ctx[2], principal="User:broker")
    lead.ctx[3] = dataclasses.replace(lead.ctx[3], principal="User:alice")

    for _ in range(2):  # the second time the short way would answer, had it learned the connection
        refused = decoded(lead.fetch(3, 0, wait_ms=0))
        assert [p.error_code for t in refused.responses for p in t.partitions] == [
            ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        assert lead.ctx[3].connection_id not in lead.router.follower_fetch_shapes
    served = decoded(lead.fetch(2, 0, wait_ms=0))
    assert [p.error_code for t in served.responses for p in t.partitions] == [0]
    assert served.responses[0].partitions[0].records

    # an ACL granting CLUSTER_ACTION lets alice's broker fetch too
    acls2 = {1: AclEntry(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", CLUSTER_ACTION, ALLOW)}
    lead.node.authorizer = authorizer(acls2)
    now = decoded(lead.fetch(3, 0, wait_ms=0))
    assert [p.error_code for t in now.responses for p in t.partitions] == [0]
