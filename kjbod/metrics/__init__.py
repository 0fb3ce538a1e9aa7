"""The node's metrics: cheap counters on the request path (counters), Kafka-named Prometheus families built at
scrape time (collect), and the `/metrics` HTTP endpoint on the node's event loop (endpoint).

It sits between the server shell (which starts the endpoint and hands the counters to each connection) and the
roles it reads at scrape time (broker, controller, storage), which never import it: they expose plain attributes.
"""

from kjbod.metrics.counters import RequestStats, TopicStats
from kjbod.metrics.endpoint import MetricsEndpoint, NodeMetrics, parse_listener

__all__ = ["MetricsEndpoint", "NodeMetrics", "RequestStats", "TopicStats", "parse_listener"]
