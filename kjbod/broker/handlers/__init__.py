"""One module per Kafka API key; importing this package registers every handler with the router."""

from kjbod.broker.handlers import (  # noqa: F401
    api_versions,
    create_topics,
    delete_topics,
    describe_cluster,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
