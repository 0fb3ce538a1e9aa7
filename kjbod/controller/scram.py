"""SCRAM credentials: AlterUserScramCredentials (API 51) turns a request into UserScramCredentialRecord and
RemoveUserScramCredentialRecord records (DescribeUserScramCredentials reads the image: kjbod.metadata.scram).

Rules (Kafka's ScramControlManager): each user may be named once per request (a deletion and an upsertion of the
same user, or two of either, answer DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same
request", and none of that user's changes are made); an empty user name is UNACCEPTABLE_CREDENTIAL, a mechanism
type other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) UNSUPPORTED_SASL_MECHANISM, fewer than the mechanism's 4096
iterations or more than 16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
RESOURCE_NOT_FOUND. The client salts the password; the controller derives StoredKey and ServerKey from it, so the
log never holds the salted password. Results: the accepted users first (deletions, then upsertions), then the
refused ones, each once.
"""

from __future__ import annotations

from typing import Any

from kjbod.controller.result import ControllerResult
from kjbod.metadata import MetadataImage
from kjbod.net.scram import MECHANISMS, credential_from_salted
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from kjbod.protocol.generated.alter_user_scram_credentials_response import AlterUserScramCredentialsResult

__all__ = ["alter_user_scram_credentials"]

BY_TYPE = {m.kafka_type: m for m in MECHANISMS.values()}
MAX_ITERATIONS = 16384
_TWICE = "A user credential cannot be altered twice in the same request"


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def alter_user_scram_credentials(image: MetadataImage, req: AlterUserScramCredentialsRequest) -> ControllerResult:
    errors: dict[str, tuple[int, str]] = {}
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    for d in req.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        error = _check_name_and_mechanism(d.name, d.mechanism)
        if error is None and (d.name, d.mechanism) not in image.scram:
            error = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[d.name] = error
        else:
            deletions[d.name] = d
    for u in req.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        error = _check_name_and_mechanism(u.name, u.mechanism)
        if error is None:
            if u.iterations < BY_TYPE[u.mechanism].min_iterations:
                error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif u.iterations > MAX_ITERATIONS:
                error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            errors[u.name] = error
        else:
            upsertions[u.name] = u
    records: list[Any] = []
    results: list[AlterUserScramCredentialsResult] = []
    for d in deletions.values():
        records.append(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
        results.append(AlterUserScramCredentialsResult(user=d.name, error_code=0, error_message=None))
    for u in upsertions.values():
        c = credential_from_salted(BY_TYPE[u.mechanism], bytes(u.salted_password), bytes(u.salt), u.iterations)
        records.append(UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=c.salt,
                                                 stored_key=c.stored_key, server_key=c.server_key,
                                                 iterations=c.iterations))
        results.append(AlterUserScramCredentialsResult(user=u.name, error_code=0, error_message=None))
    for name, (code, message) in errors.items():
        results.append(AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return ControllerResult(records, AlterUserScramCredentialsResponse(results=results))
