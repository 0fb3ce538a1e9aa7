"""Whole-request error responses (Kafka's `AbstractRequest.getErrorResponse`) for the controller's APIs and the
ones a broker refuses as a whole (authorization): the same code in every per-item error field, so a client sees
which request failed and why."""

from __future__ import annotations

from typing import Any

from kjbod.protocol.generated import (
    AllocateProducerIdsResponse,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterInterbrokerThrottledRatesResponse,
    AlterInterbrokerThrottledReplicasResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AlterUserScramCredentialsResponse,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ControllerRegistrationResponse,
    CreateAclsResponse,
    CreateDelegationTokenResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteShareGroupStateResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeDelegationTokenResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    ExpireDelegationTokenResponse,
    FetchSnapshotResponse,
    IncrementalAlterConfigsResponse,
    InitializeShareGroupStateResponse,
    ListPartitionReassignmentsResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    ReassignPartitionsResponse,
    RenewDelegationTokenResponse,
    UnregisterBrokerResponse,
    WriteShareGroupStateResponse,
)
from kjbod.protocol.generated import alter_client_quotas_response as quotas_out
from kjbod.protocol.generated import alter_interbroker_throttled_rates_response as rates_out
from kjbod.protocol.generated import alter_interbroker_throttled_replicas_response as replicas_out
from kjbod.protocol.generated import delete_share_group_state_response as delete_share_out
from kjbod.protocol.generated import initialize_share_group_state_response as init_share_out
from kjbod.protocol.generated import read_share_group_state_response as read_share_out
from kjbod.protocol.generated import read_share_group_state_summary_response as summary_share_out
from kjbod.protocol.generated import reassign_partitions_response as reassign_out
from kjbod.protocol.generated import write_share_group_state_response as write_share_out
from kjbod.protocol.generated.alter_configs_response import AlterConfigsResourceResponse as AlterResp
from kjbod.protocol.generated.alter_partition_reassignments_response import (
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from kjbod.protocol.generated.alter_user_scram_credentials_response import AlterUserScramCredentialsResult
from kjbod.protocol.generated.create_acls_response import AclCreationResult
from kjbod.protocol.generated.create_partitions_response import CreatePartitionsTopicResult
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult
from kjbod.protocol.generated.delete_acls_response import DeleteAclsFilterResult
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult
from kjbod.protocol.generated.elect_leaders_response import PartitionResult, ReplicaElectionResult
from kjbod.protocol.generated.incremental_alter_configs_response import (
    AlterConfigsResourceResponse as IncrementalResp,
)
from kjbod.protocol.runtime import ZERO_UUID


def error_response(api_key: int, request: Any, code: int, message: str) -> Any:
    if api_key == 19:
        return CreateTopicsResponse(topics=[CreatableTopicResult(name=t.name, error_code=code, error_message=message,
                                                                 configs=None) for t in request.topics])
    if api_key == 20:
        names = [(t.name, t.topic_id) for t in request.topics] or [(n, ZERO_UUID) for n in request.topic_names]
        return DeleteTopicsResponse(responses=[DeletableTopicResult(name=n, topic_id=tid, error_code=code,
                                                                    error_message=message) for n, tid in names])
    if api_key == 29:
        return DescribeAclsResponse(error_code=code, error_message=message)
    if api_key == 30:
        return CreateAclsResponse(results=[AclCreationResult(error_code=code, error_message=message)
                                           for _ in request.creations])
    if api_key == 31:
        return DeleteAclsResponse(filter_results=[DeleteAclsFilterResult(error_code=code, error_message=message)
                                                  for _ in request.filters])
    if api_key == 33:
        return AlterConfigsResponse(responses=[AlterResp(error_code=code, error_message=message,
                                                         resource_type=r.resource_type, resource_name=r.resource_name)
                                               for r in request.resources])
    if api_key == 37:
        return CreatePartitionsResponse(results=[CreatePartitionsTopicResult(name=t.name, error_code=code,
                                                                             error_message=message)
                                                 for t in request.topics])
    if api_key == 38:
        return CreateDelegationTokenResponse(error_code=code, issue_timestamp_ms=-1, expiry_timestamp_ms=-1,
                                             max_timestamp_ms=-1)
    if api_key == 39:
        return RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=-1)
    if api_key == 40:
        return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=-1)
    if api_key == 41:
        return DescribeDelegationTokenResponse(error_code=code)
    if api_key == 43:  # v0 has no top-level error: each partition named carries it too
        return ElectLeadersResponse(error_code=code, replica_election_results=[ReplicaElectionResult(
            topic=t.topic, partition_result=[PartitionResult(partition_id=p, error_code=code, error_message=message)
                                             for p in t.partitions]) for t in request.topic_partitions or ()])
    if api_key == 44:
        return IncrementalAlterConfigsResponse(responses=[
            IncrementalResp(error_code=code, error_message=message, resource_type=r.resource_type,
                            resource_name=r.resource_name) for r in request.resources])
    if api_key == 45:  # the top level and every partition, as Kafka's getErrorResponse
        return AlterPartitionReassignmentsResponse(error_code=code, error_message=message, responses=[
            ReassignableTopicResponse(name=t.name, partitions=[
                ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=message)
                for p in t.partitions]) for t in request.topics])
    if api_key == 46:
        return ListPartitionReassignmentsResponse(error_code=code, error_message=message)
    if api_key == 48:
        return DescribeClientQuotasResponse(error_code=code, error_message=message, entries=None)
    if api_key == 49:
        return AlterClientQuotasResponse(entries=[quotas_out.EntryData(
            error_code=code, error_message=message, entity=[quotas_out.EntityData(
                entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in request.entries])
    if api_key == 50:
        return DescribeUserScramCredentialsResponse(error_code=code, error_message=message)
    if api_key == 51:
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        return AlterUserScramCredentialsResponse(results=[AlterUserScramCredentialsResult(
            user=name, error_code=code, error_message=message) for name in users])
    if api_key == 56:
        return AlterPartitionResponse(error_code=code)
    if api_key == 59:
        return FetchSnapshotResponse(error_code=code)
    if api_key == 62:
        return BrokerRegistrationResponse(error_code=code)
    if api_key == 63:
        return BrokerHeartbeatResponse(error_code=code)
    if api_key == 64:
        return UnregisterBrokerResponse(error_code=code, error_message=message)
    if api_key == 67:
        return AllocateProducerIdsResponse(error_code=code)
    if api_key == 70:
        return ControllerRegistrationResponse(error_code=code, error_message=message)
    if api_key == 73:
        return AssignReplicasToDirsResponse(error_code=code)
    if api_key == 10000:
        return ReassignPartitionsResponse(reassign_partition_results=[reassign_out.ReassignPartitionResult(
            topic=t.topic, partition_errors=[reassign_out.PartitionError(
                partition_id=p.partition_id, error_code=code, error_message=message)
                for p in t.partition_reassignments]) for t in request.topic_reassignments])
    if api_key == 10001:
        return AlterInterbrokerThrottledRatesResponse(broker_errors=[rates_out.BrokerError(
            broker_id=b.broker_id, error_code=code, error_message=message) for b in request.broker_throttles])
    if api_key == 10002:
        return AlterInterbrokerThrottledReplicasResponse(topic_errors=[replicas_out.TopicError(
            topic=t.topic, partition_errors=[replicas_out.PartitionError(
                partition_id=p.partition_id, error_code=code, error_message=message)
                for p in t.partition_throttles]) for t in request.topic_throttles])
    if api_key in _SHARE_STATE:  # the share coordinator's RPCs: every partition named carries the code
        module, response, result = _SHARE_STATE[api_key]
        return response(results=[result(topic_id=t.topic_id, partitions=[module.PartitionResult(
            partition=p.partition, error_code=code, error_message=message) for p in t.partitions])
            for t in request.topics])
    raise ValueError(f"no error response for api key {api_key}")


_SHARE_STATE: dict[int, tuple[Any, Any, Any]] = {
    83: (init_share_out, InitializeShareGroupStateResponse, init_share_out.InitializeStateResult),
    84: (read_share_out, ReadShareGroupStateResponse, read_share_out.ReadStateResult),
    85: (write_share_out, WriteShareGroupStateResponse, write_share_out.WriteStateResult),
    86: (delete_share_out, DeleteShareGroupStateResponse, delete_share_out.DeleteStateResult),
    87: (summary_share_out, ReadShareGroupStateSummaryResponse, summary_share_out.ReadStateSummaryResult),
}
