"""The Kafka client side below the roles: request correlation (sans-IO), client connections with reconnects,
and the broker's channel to the controller.  Used by the broker role (registration, heartbeats, the metadata
follower) and by the admin client."""
