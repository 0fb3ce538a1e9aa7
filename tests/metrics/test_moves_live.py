"""A KIP-113 move between log dirs, seen through /metrics while it runs: bytes, rate and ETA per move and per dir,
and the ReplicaAlterLogDirsManager lag; all of it back to nothing once the move is done."""

from __future__ import annotations

import warnings

from live import free_port, kjbod_server_factory  # noqa: F401  (a fixture)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import NewTopic
    from kafka.errors import NoError

from tests.kip113.livehelp import current_dir, fill_offline, kafka_admin, set_throttle, wait_moved

from .scrape import labelled, value, wait_for

MB = 1_000_000
TOPIC = "moving"


def test_a_running_move_shows_bytes_rate_and_eta(kjbod_server_factory):  # noqa: F811
    port = free_port()
    server = kjbod_server_factory(overrides={"log.segment.bytes": str(4 << 20),
                                             "kjbod.metrics.listener": f"127.0.0.1:{port}"})
    admin = kafka_admin(server)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])
    admin.close()
    fill_offline(server, TOPIC, [0], 24 * MB, segment_bytes=4 << 20)
    admin = kafka_admin(server)
    try:
        set_throttle(admin, str(2 * MB))  # about 12 s for the whole move: long enough to be seen running
        source = current_dir(admin, TOPIC, 0)
        dest = next(str(d) for d in server.log_dirs if str(d) != source)
        assert list(admin.alter_replica_log_dirs({(TOPIC, 0, 1): dest}).values()) == [NoError]
        move = {"topic": TOPIC, "partition": "0", "source_dir": source, "dest_dir": dest}

        def running(s) -> bool:
            # A move is listed from the moment it is accepted, but its source dir is known (and labelled) only
            # once a mover thread has started copying: until then its samples carry source_dir="", so they are
            # looked for under this move's labels, not just any move's.
            return (move in labelled(s, "kjbod_replica_move_copied_bytes")
                    and value(s, "kjbod_replica_move_copied_bytes", **move) > 0
                    and value(s, "kjbod_replica_move_eta_seconds", **move) > 0
                    and value(s, "kafka_server_replicaalterlogdirsmanager_maxlag", clientId="ReplicaAlterLogDirs") > 0)

        during = wait_for(port, running, "a move with bytes copied, an ETA and a lag")
        size = value(during, "kjbod_replica_move_size_bytes", **move)
        assert 20 * MB < size < 30 * MB, size
        assert value(during, "kjbod_replica_move_copied_bytes", **move) < size
        assert value(during, "kjbod_replica_move_rate_bytes_per_second", **move) > 0
        assert value(during, "kjbod_log_dir_move_in_remaining_bytes", log_dir=dest) > 0
        assert value(during, "kjbod_log_dir_move_out_remaining_bytes", log_dir=source) > 0
        assert value(during, "kjbod_log_dir_move_in_remaining_bytes", log_dir=source) == 0
        assert value(during, "kjbod_log_dir_move_in_eta_seconds", log_dir=dest) > 0
        assert value(during, "kafka_server_replicaalterlogdirsmanager_failedpartitionscount",
                     clientId="ReplicaAlterLogDirs") == 0

        set_throttle(admin, None)
        wait_moved(admin, TOPIC, 0, dest, timeout=120)
        after = wait_for(port, lambda s: not labelled(s, "kjbod_replica_move_copied_bytes"), "the move gone")
        assert value(after, "kjbod_log_dir_move_in_remaining_bytes", log_dir=dest) == 0
        assert value(after, "kafka_server_replicaalterlogdirsmanager_maxlag", clientId="ReplicaAlterLogDirs") == 0
        assert value(after, "kafka_log_log_size", topic=TOPIC, partition="0") == size
    finally:
        admin.close()
