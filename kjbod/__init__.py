"""kjbod: Apache Kafka's JBOD feature set as a Kafka-protocol server and tools."""

__version__ = "0.1.0"
