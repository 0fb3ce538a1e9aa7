"""A blocking wrapper around `AdminClient` for scripts, notebooks' workers and Spark executors.

Strategy: the wrapper owns an `asyncio.Runner` (one private event loop) and runs each call of the async client to
completion on it, so connections, negotiated versions and metadata survive from one call to the next exactly as
in the async client.  Every public coroutine method of `AdminClient` gets a blocking twin with the same name,
signature and docstring.  Not for use from inside a running event loop (use `AdminClient` there), and not
thread-safe: give each thread its own instance.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Iterable
from typing import Any

from kjbod.admin.client import AdminClient

__all__ = ["SyncAdminClient"]

_METHODS = (
    "create_delegation_token",
    "renew_delegation_token",
    "expire_delegation_token",
    "describe_delegation_tokens",
    "create_acls",
    "describe_acls",
    "delete_acls",
    "describe_cluster",
    "describe_topics",
    "describe_log_dirs",
    "describe_replica_log_dirs",
    "alter_replica_log_dirs",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "reassign_partitions",
    "alter_interbroker_throttled_rates",
    "alter_interbroker_throttled_replicas",
    "create_topics",
    "delete_topics",
    "describe_client_quotas",
    "list_client_metrics_resources",
    "alter_client_quotas",
    "describe_user_scram_credentials",
    "create_partitions",
    "delete_records",
    "list_offsets",
    "list_groups",
    "describe_groups",
    "list_group_offsets",
    "delete_groups",
    "alter_group_offsets",
    "delete_group_offsets",
    "find_group_coordinators",
    "describe_configs",
    "incremental_alter_configs",
)


class SyncAdminClient:
    """Blocking admin client: `with SyncAdminClient("h:p") as admin: admin.describe_log_dirs()`."""

    def __init__(self, bootstrap_servers: str | Iterable[str], **options: Any) -> None:
        self._runner: asyncio.Runner | None = asyncio.Runner()
        self._client: AdminClient = self._run(_build(bootstrap_servers, options))

    def _run(self, coro: Any) -> Any:
        if self._runner is None:
            coro.close()
            raise RuntimeError("the admin client is closed")
        return self._runner.run(coro)

    @property
    def client(self) -> AdminClient:
        """The underlying async client (its loop is private to this wrapper)."""
        return self._client

    @property
    def brokers(self) -> Any:
        return self._client.brokers

    def start(self, timeout: float | None = None) -> None:
        self._run(self._client.start(timeout))

    def close(self) -> None:
        if self._runner is None:
            return
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> SyncAdminClient:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _build(bootstrap_servers: str | Iterable[str], options: dict[str, Any]) -> AdminClient:
    # Built inside the runner's loop so that anything the client binds to a loop binds to that one.
    return AdminClient(bootstrap_servers, **options)


def _blocking(name: str) -> Any:
    method = getattr(AdminClient, name)

    @functools.wraps(method)
    def call(self: SyncAdminClient, *args: Any, **kwargs: Any) -> Any:
        return self._run(getattr(self._client, name)(*args, **kwargs))

    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


for _name in _METHODS:
    setattr(SyncAdminClient, _name, _blocking(_name))
