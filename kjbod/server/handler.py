"""Re-export of the connection ↔ dispatcher contract, which lives in kjbod.wire.handler (see there)."""

from kjbod.wire.handler import CloseConnection, ListenerKind, Reply, ReplyPart, RequestContext, RequestHandler

__all__ = ["CloseConnection", "ListenerKind", "Reply", "ReplyPart", "RequestContext", "RequestHandler"]
