"""Cluster metadata as records: the immutable image, replay of records into it, and the records that rebuild it.

Every metadata change in kjbod goes one way: the controller computes records, the metadata log makes them
durable, and `kjbod.metadata.delta` replays them into a new `MetadataImage`; brokers replay the same records.
Nothing changes an image in place.
"""

from kjbod.metadata.delta import REPLAY, LocalChanges, MetadataDelta, replay
from kjbod.metadata.image import (
    BROKER_RESOURCE,
    DIR_LOST,
    DIR_MIGRATING,
    DIR_UNASSIGNED,
    EMPTY_IMAGE,
    GROUP_RESOURCE,
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    TOPIC_RESOURCE,
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    MetadataImage,
    PartitionImage,
    RateIntent,
    TopicImage,
    is_reserved_dir,
)
from kjbod.metadata.loader import MetadataLoader
from kjbod.metadata.snapshot import image_records

__all__ = [
    "BROKER_RESOURCE", "GROUP_RESOURCE", "DIR_LOST", "DIR_MIGRATING", "DIR_UNASSIGNED", "EMPTY_IMAGE", "NO_LEADER", "RECOVERED", "RECOVERING", "REPLAY",
    "TOPIC_RESOURCE", "BrokerRegistration", "ControllerRegistration", "Endpoint", "LocalChanges", "MetadataDelta", "MetadataImage", "MetadataLoader",
    "PartitionImage", "RateIntent", "TopicImage", "image_records", "is_reserved_dir", "replay",
]
