"""Field checks for validation at the edge (issues 13 and 21): every service checks its requests
in one module (consultant/validate.py, storage/validate.py, agent/validate.py) with these.

Each check raises InvalidArgument naming the field; a value shown in a message is cut to
`SHOWN` characters, so a huge string is never echoed back (gRPC refuses a status message over
its metadata limit, which the caller would see as RESOURCE_EXHAUSTED).

Every field of every request message has a bound (docs/security.md, "Validation at the edge";
tests/test_field_bounds.py sends each field's worst value to a running server): integers within
what their consumer holds, floats finite and in range, strings, bytes and repeated fields
sized. A request that does not even parse (a string that is not UTF-8) is `Malformed`, answered
INVALID_ARGUMENT by wancrawl/grpcutil.py with the path `non_utf8_field` finds."""

from __future__ import annotations

import math
from collections.abc import Sequence, Sized
from typing import Any

from wancrawl.errors import InvalidArgument

SHOWN = 80           # characters of a value shown in an error message
MAX_MESSAGE = 1000   # an error message is cut to this many characters (grpcutil's safety net)
MAX_ID = 200         # agent ids, record ids, batch ids
MAX_ADDRESS = 300    # host:port (a 253-character host name, a port)
MAX_HOST = 300       # a host as sent (canonical_host checks the 253-character limit)
MAX_URL = 16_384     # a URL on the wire (agents' scope usually allows far less)
MAX_TEXT = 1000      # free text: city, country, ISP, content type...
MAX_EPOCH = 2**63 - 1  # epochs are SQL BIGINTs at the consultant
# Counters, page counts, queue lengths and queue seqs a request may carry: 2^53 is exact as a
# float (the consultant keeps load reports as JSON and the balancer does float arithmetic on
# them; metrics are floats) and far below SQLite's and SQL's signed 64-bit INTEGER/BIGINT
# (2^63-1), so a sum of such values stays in range too. No crawl counts that far (2^53 pages
# at 10^5 pages/s is 2,800 years).
MAX_COUNT = 2**53
# Unix times (fetch times, backoffs, robots.txt expiry): year 5138. NaN and infinities are
# refused by `finite`; 1e300 would sort after every real time and park a host for ever.
MAX_TIME = 1e11
# The largest bytes field (a WARC record, a robots.txt body is smaller): half of gRPC's message
# limit (wancrawl/grpcutil.py MAX_MESSAGE_BYTES, 64 MiB), so a field over it can still arrive and
# be refused by name rather than by the transport; agents keep at most 10 MiB of a body.
MAX_BLOB = 32 * 1024 * 1024


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


def integer(field: str, value: int, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """An integer within [low, high] (by default a count: 0..MAX_COUNT)."""
    if value < low or value > high:
        raise InvalidArgument(f"{field} = {value} is out of range ({low}..{high})")
    return value


def integers(field: str, values: Sequence[int], *, low: int = 0, high: int = MAX_COUNT) -> None:
    """Every entry of a repeated integer field within [low, high] (min/max first: a million
    entries are checked at C speed); the message names the first entry out of range."""
    if values and (min(values) < low or max(values) > high):
        i = next(i for i, v in enumerate(values) if not low <= v <= high)
        integer(indexed(field, i), values[i], low=low, high=high)


def unix_time(field: str, value: float) -> float:
    """A unix time: finite, 0 (none) to MAX_TIME."""
    return finite(field, value, low=0.0, high=MAX_TIME)


def epoch(field: str, value: int) -> int:
    """An epoch a consultant could have given (epochs count up from 0 as SQL BIGINTs)."""
    if value > MAX_EPOCH:
        raise InvalidArgument(f"{field} = {value} is not an epoch any consultant gives (at most {MAX_EPOCH})")
    return value


def indexed(field: str, i: int) -> str:
    """`field[i]`, for messages about one entry of a repeated field."""
    return f"{field}[{i}]"


# -- requests that do not parse ------------------------------------------------------------------

class Malformed:
    """What a server's request deserializer returns for bytes that are not a message of its type
    (wancrawl/grpcutil.py): raising there would make grpc answer UNKNOWN and log a traceback.
    The error interceptor answers INVALID_ARGUMENT with `reason`; the authorization interceptor
    lets it through to that refusal (it has no fields to check)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Malformed({self.reason!r})"


_TYPE_STRING, _TYPE_MESSAGE = 9, 11  # google.protobuf.descriptor.FieldDescriptor.TYPE_*


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated or over-long varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def non_utf8_field(descriptor: Any, data: bytes, prefix: str = "") -> str | None:
    """The path (`host.queue[2].url`) of the first string field of `data`, a serialized message
    of `descriptor`, that is not UTF-8; None if there is none (or the bytes are not a message at
    all: the caller then says so). Walks the wire format itself: the protobuf runtime only says
    that *some* string field had bad UTF-8."""
    counts: dict[int, int] = {}
    i, n = 0, len(data)
    try:
        while i < n:
            tag, i = _varint(data, i)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                _, i = _varint(data, i)
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            elif wire == 2:
                length, i = _varint(data, i)
                chunk, i = data[i:i + length], i + length
                field = descriptor.fields_by_number.get(number)
                if field is None or i > n:
                    continue
                k = counts.get(number, 0)
                counts[number] = k + 1
                name = prefix + field.name + (f"[{k}]" if field.is_repeated else "")
                if field.type == _TYPE_STRING:
                    try:
                        chunk.decode("utf-8")
                    except UnicodeDecodeError:
                        return name
                elif field.type == _TYPE_MESSAGE:
                    found = non_utf8_field(field.message_type, chunk, name + ".")
                    if found is not None:
                        return found
            else:
                return None  # groups (proto2 only) or garbage
    except ValueError:
        return None
    return None


def malformed(descriptor: Any, data: bytes, exc: BaseException) -> Malformed:
    """Why `data` did not parse as a message of `descriptor` (None: type unknown), said plainly."""
    what = getattr(descriptor, "full_name", "") or "request"
    path = non_utf8_field(descriptor, data) if descriptor is not None else None
    if path is not None:
        return Malformed(f"{path} is not valid UTF-8 (a string field of {what})")
    return Malformed(clip_message(f"the request is not a valid {what} message ({len(data)} bytes): {exc}", SHOWN * 4))
