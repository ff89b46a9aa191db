"""wancrawl's own exceptions; each service translates them to gRPC status codes in one place."""

from __future__ import annotations


class WancrawlError(Exception):
    """Base of every error wancrawl raises on purpose."""


class ConfigError(WancrawlError):
    """A config file, key or value is wrong; the message names the file and the key."""


class InvalidArgument(WancrawlError):
    """A request field is malformed (maps to INVALID_ARGUMENT)."""


class PermissionDenied(WancrawlError):
    """The caller is who it says, but may not do this (maps to PERMISSION_DENIED): e.g. an agent
    claiming an address or a location the consultant cannot verify."""


class NotFound(WancrawlError):
    """The named thing (agent, host, record) does not exist (maps to NOT_FOUND)."""


class FailedPrecondition(WancrawlError):
    """The request is valid but the state does not allow it (maps to FAILED_PRECONDITION)."""


class Unavailable(WancrawlError):
    """A dependency (database, peer, DNS) cannot be reached now (maps to UNAVAILABLE)."""


class NotBuiltYet(WancrawlError):
    """A feature whose issue is not done yet; said plainly instead of faking it."""
