"""The metric names the endpoint must export, with their label names and where each name comes from.

Kafka MBeans are turned into names the way the Prometheus JMX exporter does with Strimzi's example rules
(strimzi-kafka-operator, packaging/examples/metrics/kafka-metrics.yaml, ``lowercaseOutputName: true``):

* ``kafka.<d><type=T, name=N, k=v><>Value`` (generic gauges, 0-2 key/value pairs) -> ``kafka_<d>_<t>_<n>{k}``;
* ``...name=<X>PerSec, k=v><>Count`` (generic per-second counters) -> ``kafka_<d>_<t>_<x>_total{k}``;
* histograms and timers: ``...><>Count`` -> ``..._count``, ``...><>(\\d+)thPercentile`` -> the bare name with a
  ``quantile`` label ("0.50", "0.99", "0.999");
* ``kafka.server<type=raft-metrics><>(.+):`` -> ``kafka_server_raftmetrics_<attribute with - as _>``.

RequestMetrics follow the same generic rules (Strimzi's current file drops them for volume; older versions and
most dashboards keep them).  The MBeans themselves are those of Kafka's "Monitoring" documentation (docs/ops.html)
and KIP-858 (QueuedReplicaToDirAssignments, under kafka.server:type=KafkaServer as the KIP names it).
"""

from __future__ import annotations

STRIMZI = "Strimzi kafka-metrics.yaml generic rules"
OPS = "Kafka docs/ops.html Monitoring"

# (prometheus name, label names, the MBean or source)
BROKER: list[tuple[str, frozenset[str], str]] = [
    ("kafka_log_logmanager_offlinelogdirectorycount", frozenset(),
     f"kafka.log:type=LogManager,name=OfflineLogDirectoryCount ({OPS}; {STRIMZI})"),
    ("kafka_log_logmanager_logdirectoryoffline", frozenset({"logDirectory"}),
     f"kafka.log:type=LogManager,name=LogDirectoryOffline,logDirectory=... ({OPS}; {STRIMZI})"),
    ("kafka_log_log_size", frozenset({"topic", "partition"}), "kafka.log:type=Log,name=Size,topic,partition"),
    ("kafka_log_log_numlogsegments", frozenset({"topic", "partition"}), "kafka.log:type=Log,name=NumLogSegments"),
    ("kafka_log_log_logendoffset", frozenset({"topic", "partition"}), "kafka.log:type=Log,name=LogEndOffset"),
    ("kafka_log_log_logstartoffset", frozenset({"topic", "partition"}), "kafka.log:type=Log,name=LogStartOffset"),
    ("kafka_log_logflushstats_logflushrateandtimems_count", frozenset(),
     "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (Count)"),
    ("kafka_log_logflushstats_logflushrateandtimems", frozenset({"quantile"}),
     "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (percentiles)"),
    ("kafka_server_kafkaserver_queuedreplicatodirassignments", frozenset(),
     "kafka.server:type=KafkaServer,name=QueuedReplicaToDirAssignments (KIP-858)"),
    ("kafka_server_replicaalterlogdirsmanager_maxlag", frozenset({"clientId"}),
     "kafka.server:type=ReplicaAlterLogDirsManager,name=MaxLag,clientId=ReplicaAlterLogDirs (KIP-113)"),
    ("kafka_server_replicaalterlogdirsmanager_failedpartitionscount", frozenset({"clientId"}),
     "kafka.server:type=ReplicaAlterLogDirsManager,name=FailedPartitionsCount (KIP-113)"),
    ("kafka_server_replicaalterlogdirsmanager_deadthreadcount", frozenset({"clientId"}),
     "kafka.server:type=ReplicaAlterLogDirsManager,name=DeadThreadCount (KIP-113)"),
    ("kafka_network_requestmetrics_requests_total", frozenset({"request", "version"}),
     "kafka.network:type=RequestMetrics,name=RequestsPerSec,request,version"),
    ("kafka_network_requestmetrics_errors_total", frozenset({"request", "error"}),
     "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request,error"),
    *[(f"kafka_network_requestmetrics_{t}{suffix}", frozenset({"request"} | extra),
       f"kafka.network:type=RequestMetrics,name={t},request")
      for t in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems")
      for suffix, extra in (("_count", frozenset()), ("", frozenset({"quantile"})))],
    *[(f"kafka_server_brokertopicmetrics_{m}_total", labels,
       f"kafka.server:type=BrokerTopicMetrics,name={m}PerSec[,topic]")
      for m in ("messagesin", "bytesin", "bytesout", "failedproducerequests", "failedfetchrequests")
      for labels in (frozenset(), frozenset({"topic"}))],
    *[(f"kafka_server_replicamanager_{m}", frozenset(), f"kafka.server:type=ReplicaManager,name={m}")
      for m in ("underreplicatedpartitions", "underminisrpartitioncount", "offlinereplicacount", "partitioncount",
                "leadercount")],
    ("kafka_server_replicamanager_isrshrinks_total", frozenset(), "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec"),
    ("kafka_server_replicamanager_isrexpands_total", frozenset(), "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec"),
    ("kafka_server_replicafetchermanager_maxlag", frozenset({"clientId"}),
     "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica"),
    ("kafka_server_leaderreplication_byte_rate", frozenset(),
     "kafka.server:type=LeaderReplication byte-rate (JMX exporter default naming; no Strimzi rule)"),
    ("kafka_server_followerreplication_byte_rate", frozenset(),
     "kafka.server:type=FollowerReplication byte-rate (JMX exporter default naming; no Strimzi rule)"),
    *[(f"kafka_server_socket_server_metrics_connection_{m}", frozenset({"listener", "networkProcessor"}),
       f"kafka.server:type=socket-server-metrics,listener=...,networkProcessor=... {m.replace('_', '-')} "
       f"({OPS}; {STRIMZI})") for m in ("count", "creation_rate", "creation_total")],
    # kjbod's own
    *[(f"kjbod_log_dir_{m}", frozenset({"log_dir"}), "kjbod") for m in (
        "total_bytes", "usable_bytes", "reserve_bytes", "partitions", "recent_latency_seconds", "cordoned",
        "move_in_remaining_bytes", "move_out_remaining_bytes", "move_in_rate_bytes_per_second",
        "move_out_rate_bytes_per_second", "move_in_eta_seconds", "move_out_eta_seconds")],
    ("kjbod_log_dir_state", frozenset({"log_dir", "state"}), "kjbod"),
    ("kjbod_log_dir_operation_seconds_bucket", frozenset({"log_dir", "op", "le"}), "kjbod"),
    ("kjbod_log_dir_operation_seconds_count", frozenset({"log_dir", "op"}), "kjbod"),
    ("kjbod_log_dir_operation_seconds_sum", frozenset({"log_dir", "op"}), "kjbod"),
    ("kjbod_replica_moves_not_converging", frozenset(), "kjbod (moves whose catch-up cannot end)"),
]

CONTROLLER: list[tuple[str, frozenset[str], str]] = [
    *[(f"kafka_controller_kafkacontroller_{m}", frozenset(), f"kafka.controller:type=KafkaController,name={m}")
      for m in ("activecontrollercount", "offlinepartitionscount", "globalpartitioncount", "globaltopiccount",
                "fencedbrokercount", "activebrokercount", "lastappliedrecordoffset", "lastcommittedrecordoffset")],
    ("kafka_server_raftmetrics_log_end_offset", frozenset(),
     "kafka.server:type=raft-metrics log-end-offset (Strimzi raft-metrics rule)"),
    ("kjbod_controller_broker_metadata_lag_records", frozenset({"broker"}), "kjbod"),
]

# Present only while a move between dirs runs (tests/metrics/test_moves_live.py checks them then).
MOVES = ["kjbod_replica_move_copied_bytes", "kjbod_replica_move_size_bytes",
         "kjbod_replica_move_rate_bytes_per_second", "kjbod_replica_move_eta_seconds"]
