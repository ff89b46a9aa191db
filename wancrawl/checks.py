"""Field checks for validation at the edge (issue 13): every service checks its requests in one
module (consultant/validate.py, storage/validate.py, agent/validate.py) with these.

Each check raises InvalidArgument naming the field; a value shown in a message is cut to
`SHOWN` characters, so a huge string is never echoed back (gRPC refuses a status message over
its metadata limit, which the caller would see as RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import math
from collections.abc import Sized

from wancrawl.errors import InvalidArgument

SHOWN = 80           # characters of a value shown in an error message
MAX_MESSAGE = 1000   # an error message is cut to this many characters (grpcutil's safety net)
MAX_ID = 200         # agent ids, record ids, batch ids
MAX_ADDRESS = 300    # host:port (a 253-character host name, a port)
MAX_HOST = 300       # a host as sent (canonical_host checks the 253-character limit)
MAX_URL = 16_384     # a URL on the wire (agents' scope usually allows far less)
MAX_TEXT = 1000      # free text: city, country, ISP, content type...
MAX_EPOCH = 2**63 - 1  # epochs are SQL BIGINTs at the consultant


def shown(value: object, limit: int = SHOWN) -> str:
    """repr() of a value cut to `limit` characters (with the full length when cut)."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def clip_message(message: str, limit: int = MAX_MESSAGE) -> str:
    """An error message cut to `limit` characters."""
    return message if len(message) <= limit else message[:limit] + f"... ({len(message)} characters)"


def finite(field: str, value: float, *, low: float | None = None, high: float | None = None) -> float:
    """A float that is a number (not NaN or infinite), within [low, high] when given."""
    if not math.isfinite(value):
        raise InvalidArgument(f"{field} must be a finite number, not {value!r}")
    if low is not None and value < low:
        raise InvalidArgument(f"{field} = {value!r} is below {low}")
    if high is not None and value > high:
        raise InvalidArgument(f"{field} = {value!r} is above {high}")
    return value


def text(field: str, value: str, limit: int, *, required: bool = False) -> str:
    """A string of at most `limit` characters (and not empty when required)."""
    if required and not value:
        raise InvalidArgument(f"{field} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} characters long; at most {limit}: {shown(value)}")
    return value


def count(field: str, items: Sized, limit: int, *, required: bool = False) -> int:
    """A repeated field with at most `limit` entries (at least one when required)."""
    n = len(items)
    if required and not n:
        raise InvalidArgument(f"{field} is empty")
    if n > limit:
        raise InvalidArgument(f"{n} {field} in one request; at most {limit}")
    return n


def size(field: str, value: bytes, limit: int) -> int:
    """A bytes field of at most `limit` bytes."""
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} bytes; at most {limit}")
    return len(value)


def epoch(field: str, value: int) -> int:
    """An epoch a consultant could have given (epochs count up from 0 as SQL BIGINTs)."""
    if value > MAX_EPOCH:
        raise InvalidArgument(f"{field} = {value} is not an epoch any consultant gives (at most {MAX_EPOCH})")
    return value


def indexed(field: str, i: int) -> str:
    """`field[i]`, for messages about one entry of a repeated field."""
    return f"{field}[{i}]"
