"""DescribeUserScramCredentials (API 50) answered from a metadata image: brokers and controllers answer it from
their own image, as Kafka's brokers answer it from their metadata cache. Never the keys or salts: mechanism and
iteration count only."""

from __future__ import annotations

from kjbod.metadata.image import MetadataImage
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
from kjbod.protocol.generated.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResult,
)

__all__ = ["describe_user_scram_credentials"]


def describe_user_scram_credentials(image: MetadataImage,
                                    req: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    """Kafka's answer: every user with credentials when `users` is null or empty; else each named user once
    (DUPLICATE_RESOURCE "Cannot describe SCRAM credentials for the same user twice in a single request" for a
    repeated name, RESOURCE_NOT_FOUND "Attempt to describe a user credential that does not exist: <user>" for a
    user without credentials)."""
    by_user: dict[str, list[CredentialInfo]] = {}
    for (name, mechanism), entry in sorted(image.scram.items()):
        by_user.setdefault(name, []).append(CredentialInfo(mechanism=mechanism, iterations=entry.iterations))
    results: list[DescribeUserScramCredentialsResult] = []
    if not req.users:
        for name, infos in by_user.items():
            results.append(DescribeUserScramCredentialsResult(user=name, error_code=0, credential_infos=infos))
        return DescribeUserScramCredentialsResponse(error_code=0, results=results)
    seen: dict[str, int] = {}
    for u in req.users:
        seen[u.name] = seen.get(u.name, 0) + 1
    for name, count in seen.items():
        if count > 1:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
        elif name not in by_user:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            results.append(DescribeUserScramCredentialsResult(user=name, error_code=0,
                                                              credential_infos=by_user[name]))
    return DescribeUserScramCredentialsResponse(error_code=0, results=results)
