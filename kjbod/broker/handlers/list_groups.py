"""ListGroups (key 16), versions 0-5.

Version notes: v1 throttle time; v3 flexible; v4 states filter and the group state; v5 types filter and the
group type ("consumer" for a KIP-848 group, whose state is its own: Empty, Assigning, Reconciling, Stable;
"share" for a KIP-932 share group, protocol type "share", Empty or Stable; "streams" for a KIP-1071 streams group,
protocol type "streams", its own states (Empty, NotReady, Assigning, Reconciling, Stable); "classic" otherwise).
Lists the groups whose `__consumer_offsets` partition this broker leads; COORDINATOR_LOAD_IN_PROGRESS (with the groups known so far) while one of those partitions is loading.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, allowed_cluster
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, GROUP
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ListGroupsRequest, ListGroupsResponse
from kjbod.protocol.generated.list_groups_response import ListedGroup


@api(ListGroupsRequest)
def handle(node, request, body: ListGroupsRequest) -> ListGroupsResponse:
    coordinator = coordinator_of(node)
    coordinator.status("")  # refreshes what is led here
    states = {s.lower() for s in body.states_filter}
    types = {t.lower() for t in body.types_filter}
    groups = []
    everything = allowed_cluster(node, request, DESCRIBE)  # else the groups it may DESCRIBE, as Kafka's
    book = coordinator.book
    listed: list[tuple[str, str, str, str]] = [  # id, protocol type, state, type
        (gid, g.protocol_type or "", g.state.value, "classic") for gid, g in book.groups.items()
        if gid not in book.consumer_groups and gid not in coordinator.streams_groups]
    listed += [(gid, "consumer", g.state.value, "consumer") for gid, g in book.consumer_groups.items()]
    listed += [(gid, "share", g.state.value, "share") for gid, g in coordinator.share_groups.items()]
    listed += [(gid, "streams", g.state().value, "streams") for gid, g in coordinator.streams_groups.items()]
    for gid, protocol_type, state, kind in listed:
        if coordinator.partition_of(gid) not in coordinator.owned:
            continue
        if not everything and not allowed(node, request, DESCRIBE, GROUP, gid):
            continue
        if (states and state.lower() not in states) or (types and kind not in types):
            continue
        groups.append(ListedGroup(group_id=gid, protocol_type=protocol_type, group_state=state, group_type=kind))
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading else 0
    return ListGroupsResponse(error_code=code, groups=groups)
