"""One module per Kafka API key; importing this package registers every handler with the router."""

from kjbod.broker.handlers import (  # noqa: F401
    allocate_producer_ids,
    alter_configs,
    alter_replica_log_dirs,
    api_versions,
    broker_heartbeat,
    broker_registration,
    create_topics,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    fetch,
    fetch_snapshot,
    find_coordinator,
    incremental_alter_configs,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    unregister_broker,
)
