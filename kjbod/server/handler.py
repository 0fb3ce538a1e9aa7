"""The contract between a connection and the request dispatcher, as seen from the server shell.

The definitions live in kjbod.wire.handler, because both sides depend on them and the broker's router (which
implements `RequestHandler` and raises `CloseConnection`) sits below the server layer; this module re-exports them so
server code and its tests have one import path and, above all, the same classes.
"""

from kjbod.wire.handler import (
    CloseConnection,
    Later,
    ListenerKind,
    Reply,
    ReplyPart,
    RequestContext,
    RequestHandler,
)

__all__ = ["CloseConnection", "Later", "ListenerKind", "Reply", "ReplyPart", "RequestContext", "RequestHandler"]
