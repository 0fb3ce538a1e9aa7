"""The broker's names for the metadata image (kjbod.metadata): the image is immutable and replaced whole when
the controller commits records; handlers read `node.metadata`, the image current when they ask."""

from __future__ import annotations

from kjbod.metadata.image import MetadataImage, PartitionImage, TopicImage
from kjbod.metadata.names import MAX_TOPIC_NAME, TOPIC_NAME, topic_name_problem

TopicState = TopicImage
PartitionState = PartitionImage

__all__ = ["MAX_TOPIC_NAME", "TOPIC_NAME", "MetadataImage", "PartitionState", "TopicState", "topic_name_problem"]
