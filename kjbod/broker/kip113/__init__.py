"""KIP-113 on one broker: moving replicas between its log dirs.

* :mod:`.throttle`: the intra-broker throttle (``replica.alter.log.dirs.io.max.bytes.per.second``), one
  absolute-schedule pacer shared by every mover thread;
* :mod:`.failpoints`: named crash points in the move, armed by an environment variable for tests;
* :mod:`.convergence`: whether a move gains on its source (pure logic; the mover's warning and the CLI's line);
* :mod:`.mover`: accepting moves durably (their ``-future`` dirs made before the answer), the pool of mover
  threads, the copy itself, the swap and crash recovery.

The protocol side lives in the DescribeLogDirs and AlterReplicaLogDirs handlers (kjbod/broker/handlers).
"""

from kjbod.broker.kip113.mover import MoveProgress, ReplicaMover
from kjbod.broker.kip113.throttle import UNLIMITED, Throttle

__all__ = ["UNLIMITED", "MoveProgress", "ReplicaMover", "Throttle"]
