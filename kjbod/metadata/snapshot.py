"""The records that rebuild an image: what a metadata snapshot holds.

`image_records(image)` lists, in an order replay accepts (features, brokers, controllers, configs, then each topic with its
partitions, kjbod's KIP-179 throttle intents, then the producer id watermark), one record per fact of the image, so that
`replay(EMPTY_IMAGE, image_records(image))` equals `image`.  A broker with failed dirs is written as Kafka's log
has it: a RegisterBrokerRecord with every dir, then a BrokerRegistrationChangeRecord with the online ones, so
the failed dirs are still known after a snapshot (BrokerRegistration.offline_dirs).  The controller hands these to the metadata log's
`write_snapshot` when enough bytes were written since the last snapshot.
"""

from __future__ import annotations

from typing import Any

from kjbod.metadata.features import ELR_METADATA_VERSION, METADATA_VERSION
from kjbod.metadata.image import MetadataImage
from kjbod.protocol.generated import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    ReassignmentIntentRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    ThrottledRateIntentRecord,
    ThrottledReplicasIntentRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from kjbod.protocol.generated.client_quota_record import EntityData as QuotaEntityData
from kjbod.protocol.generated.register_broker_record import BrokerEndpoint, BrokerFeature
from kjbod.protocol.generated.register_controller_record import ControllerEndpoint, ControllerFeature


def image_records(image: MetadataImage) -> list[Any]:
    # metadata.version first: the snapshot writer picks the partition records' version from it.
    out: list[Any] = [FeatureLevelRecord(name=name, feature_level=level)
                      for name, level in sorted(image.features.items(), key=lambda kv: (kv[0] != METADATA_VERSION, kv[0]))]
    with_elr = METADATA_VERSION not in image.features or image.features[METADATA_VERSION] >= ELR_METADATA_VERSION
    for bid, b in sorted(image.brokers.items()):
        out.append(RegisterBrokerRecord(
            broker_id=bid, incarnation_id=b.incarnation_id, broker_epoch=b.epoch,
            end_points=[BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                        for e in b.listeners],
            features=[BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(b.features.items())],
            rack=b.rack, fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown,
            log_dirs=[*b.log_dirs, *b.offline_dirs],
            cordoned_log_dirs=None if b.cordoned_dirs is None else list(b.cordoned_dirs)))
        if b.offline_dirs and b.log_dirs:  # (every dir failed: an empty list would read as "no change")
            out.append(BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=b.epoch, log_dirs=list(b.log_dirs)))
    for cid, reg in sorted(image.controllers.items()):
        out.append(RegisterControllerRecord(
            controller_id=cid, incarnation_id=reg.incarnation_id, zk_migration_ready=reg.zk_migration_ready,
            end_points=[ControllerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                        for e in reg.listeners],
            features=[ControllerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(reg.features.items())]))
    for (rtype, rname), values in sorted(image.configs.items()):
        out += [ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v)
                for k, v in sorted(values.items())]
    for name, topic in sorted(image.topics_by_name.items()):
        out.append(TopicRecord(name=name, topic_id=topic.topic_id))
        for pid, p in sorted(topic.partitions.items()):
            out.append(PartitionRecord(
                partition_id=pid, topic_id=topic.topic_id, replicas=list(p.replicas), isr=list(p.isr),
                leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                directories=list(p.directories), leader_recovery_state=p.leader_recovery_state,
                adding_replicas=list(p.adding), removing_replicas=list(p.removing),
                # Kafka's PartitionRegistration.toRecord: both lists, empty or not, from 4.0-IV1 on
                eligible_leader_replicas=list(p.elr) if with_elr else None,
                last_known_elr=list(p.last_known_elr) if with_elr else None))
            if p.intent is not None:
                out.append(ReassignmentIntentRecord(
                    topic_id=topic.topic_id, partition_id=pid, target_replicas=list(p.intent),
                    target_directory_brokers=list(p.intent_dirs), target_directories=list(p.intent_dirs.values())))
    for (tid, pid), (leaders, followers) in sorted(image.throttled_replicas.items()):
        out.append(ThrottledReplicasIntentRecord(topic_id=tid, partition_id=pid, leaders=list(leaders),
                                                 followers=list(followers)))
    for bid, r in sorted(image.throttled_rates.items()):
        out.append(ThrottledRateIntentRecord(broker_id=bid, leader_rate=r.leader_rate, leader_restore=r.leader_restore,
                                             follower_rate=r.follower_rate, follower_restore=r.follower_restore))
    for (name, mechanism), c in sorted(image.scram.items()):
        out.append(UserScramCredentialRecord(name=name, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key,
                                             server_key=c.server_key, iterations=c.iterations))
    for acl_id, a in sorted(image.acls.items()):
        out.append(AccessControlEntryRecord(id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                                            pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                                            operation=a.operation, permission_type=a.permission_type))
    for token_id, t in sorted(image.tokens.items()):
        out.append(DelegationTokenRecord(owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                                         issue_timestamp=t.issue_timestamp, max_timestamp=t.max_timestamp,
                                         expiration_timestamp=t.expiration_timestamp, token_id=token_id))
    for entity, quotas in sorted(image.client_quotas.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]]):
        out += [ClientQuotaRecord(entity=[QuotaEntityData(entity_type=t, entity_name=n) for t, n in entity],
                                  key=k, value=q) for k, q in sorted(quotas.items())]
    if image.next_producer_id:
        out.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id))
    return out
