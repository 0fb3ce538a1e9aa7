"""DescribeUserScramCredentials (key 50), version 0 (flexible).

Answered from this node's metadata image (kjbod.metadata.scram), as Kafka's brokers answer it from their metadata
cache: per user, the mechanisms and iteration counts of its SCRAM credentials.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.metadata.scram import describe_user_scram_credentials
from kjbod.protocol.generated import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse


@api(DescribeUserScramCredentialsRequest)
def handle(node, request, body: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    return describe_user_scram_credentials(node.metadata, body)
