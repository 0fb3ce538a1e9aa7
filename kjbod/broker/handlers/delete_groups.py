"""DeleteGroups (key 42), versions 0-2.

Version notes: v1 same as v0; v2 flexible.  Only a group without members may go (NON_EMPTY_GROUP otherwise);
an unknown one answers GROUP_ID_NOT_FOUND.  Deleting writes tombstones for the group's metadata and every
offset it committed to its `__consumer_offsets` partition.  A share group's share state is deleted through the
persister first (the group stays, with the persister's error code, when that fails), then its records are
tombstoned, as Kafka deletes share groups.  An empty streams group (KIP-1071) is forgotten with the offsets
committed under its id; one with members is NON_EMPTY_GROUP (a join arriving during the deletion waits for it).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.groups.state import GroupState
from kjbod.broker.router import api
from kjbod.metadata.acls import DELETE, GROUP
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteGroupsRequest, DeleteGroupsResponse
from kjbod.protocol.generated.delete_groups_response import DeletableGroupResult


@api(DeleteGroupsRequest)
async def handle(node, request, body: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = coordinator_of(node)
    results = []
    for gid in body.groups_names:
        code: int
        if not allowed(node, request, DELETE, GROUP, gid):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            code = coordinator.status(gid) if gid else ErrorCode.INVALID_GROUP_ID
        cg = coordinator.book.consumer_groups.get(gid) if not code else None
        sg = coordinator.share_groups.get(gid) if not code else None
        stg = coordinator.streams_groups.get(gid) if not code else None
        if stg is not None:
            code = await coordinator.delete_streams_group(gid)
        elif sg is not None:
            code = ErrorCode.NON_EMPTY_GROUP if sg.members else await coordinator.delete_share_group(gid)
        elif cg is not None:
            code = ErrorCode.NON_EMPTY_GROUP if cg.members else await coordinator.delete_group(gid)
        elif not code:
            g = coordinator.book.groups.get(gid)
            if g is None or g.is_(GroupState.DEAD):
                code = ErrorCode.GROUP_ID_NOT_FOUND
            elif not g.is_(GroupState.EMPTY):
                code = ErrorCode.NON_EMPTY_GROUP
            else:
                code = await coordinator.delete_group(gid)
        results.append(DeletableGroupResult(group_id=gid, error_code=code))
    return DeleteGroupsResponse(results=results)
