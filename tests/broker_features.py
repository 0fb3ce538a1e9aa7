"""The feature ranges a kjbod broker offers when it registers, for tests that register brokers by hand: the
controller writes the cluster's levels as its first records, and a broker that cannot run them is refused
(UNSUPPORTED_VERSION), as in Kafka."""

from __future__ import annotations

from kjbod.metadata import features
from kjbod.protocol.generated.broker_registration_request import Feature

SUPPORTED_FEATURES = [Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(features.SUPPORTED.items())]
