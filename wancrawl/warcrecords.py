"""Agent-side WARC/1.1 record building: one fetch becomes gzip-member records that storage only appends."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote, urlsplit

from isal import isal_zlib

from wancrawl.errors import InvalidArgument
from wancrawl.urls import split_target

WARC_VERSION = "1.1"
DEFAULT_LEVEL = 4  # the agent's default too (storage_out.gzip_level): ratio ~4.5 for 2/3 of level 6's CPU
TRUNCATED_REASONS = ("length", "time", "disconnect", "unspecified")
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# Bodies reach us de-chunked (and maybe decoded), so these headers would lie about the stored payload.
_HOP_HEADERS = ("transfer-encoding",)

Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class FetchResult:
    """What the agent knows about one HTTP exchange."""

    url: str
    status: int
    response_headers: Headers
    body: bytes
    agent_id: str
    started_at: float  # epoch seconds; becomes WARC-Date
    ended_at: float
    method: str = "GET"
    request_headers: Headers = ()
    reason: str = ""
    http_version: str = "HTTP/1.1"
    ip: str = ""  # peer address; WARC-IP-Address
    truncated: str | None = None  # one of TRUNCATED_REASONS when the agent cut the body
    body_decoded: bool = False  # True when Content-Encoding was already undone (httpx .content)
    extra_metadata: Sequence[tuple[str, str]] = ()


@dataclass
class Capture:
    """One capture ready for storage: gzip members plus the few fields storage indexes."""

    record_id: str  # "urn:uuid:..." of the response record; the idempotency key
    url: str
    agent_id: str
    fetched_at: float
    warc_date: str
    status: int
    content_type: str
    payload_digest: str  # "sha1:BASE32", as in WARC-Payload-Digest
    payload_length: int
    ip: str
    truncated: str
    response: bytes  # gzip member holding the response record
    request: bytes  # gzip member holding the request record
    metadata: bytes  # gzip member holding the metadata record
    http_headers: bytes  # raw status line + headers, so storage can write a revisit instead
    raw_length: int  # uncompressed bytes of the three records
    # A fetch again of a URL the agent holds a previous capture of (a revisit from its schedule):
    # storage compares it with the URL's latest capture only then (docs/storage.md).
    refetch: bool = False


_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32 for b in _B32]  # 10 bits -> two base32 digits
_B32_SHIFTS = tuple(range(150, -1, -10))  # a SHA-1 is 160 bits: 32 digits, no padding


def sha1_digest(data: bytes) -> str:
    """A WARC digest value: "sha1:" and the base32 SHA-1 (what base64.b32encode gives, in 60% of
    its time: four digests per page; tests/test_storage_warcrecords.py compares the two)."""
    return _b32_digest(hashlib.sha1(data).digest())


def _b32_digest(digest: bytes) -> str:
    n = int.from_bytes(digest, "big")
    return "sha1:" + "".join([_B32_PAIRS[(n >> s) & 1023] for s in _B32_SHIFTS])


def _uuid4_urns(k: int) -> list[str]:
    """k random (version 4) UUIDs as "urn:uuid:..." strings, what str(uuid.uuid4()) gives, from
    one os.urandom call: a third of uuid.uuid4()'s time, three per page."""
    out = []
    for h in (os.urandom(16 * k).hex()[i:i + 32] for i in range(0, 32 * k, 32)):
        # Version 4 in the 13th digit, the RFC 4122 variant (10xx) in the 17th.
        out.append(f"urn:uuid:{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return out


_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def warc_date(ts: float) -> str:
    """WARC/1.1 date with microseconds, UTC: what strftime("%Y-%m-%dT%H:%M:%S.%fZ") writes
    (tests/test_storage_warcrecords.py compares them), by isoformat, which datetime formats
    itself where strftime goes through time.strftime and the C library's (issue 24: two per
    page, 5.4 -> 3.5 us each on an idle core; strftime took 23 us a call in the agent's cProfile)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="microseconds")[:-6] + "Z"


def isal_level(level: int) -> int:
    """zlib's 1..9 (the `gzip_level` setting) on ISA-L's 0..3: ISA-L's level 1 compresses the lab's
    pages a little better than zlib's 4 at a quarter of its CPU (issue 24; docs/benchmarks.md)."""
    return 1 if level <= 5 else 2 if level <= 8 else 3


def gzip_member(data: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    """One gzip member (wbits 31: the gzip header and trailer WARC readers expect), deflated by
    ISA-L (python-isal): the same format as zlib's, byte-valid for warcio, cdxj-indexer, pywb."""
    return isal_zlib.compress(data, isal_level(level), 31)


def _clean_headers(headers: Headers, body_decoded: bool, body_len: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if low in _HOP_HEADERS or (body_decoded and low in ("content-encoding", "content-length")):
            out.append((f"X-Wancrawl-Orig-{name}", value))
        else:
            out.append((name, value))
    if body_decoded:
        out.append(("Content-Length", str(body_len)))
    return out


def _check(fetch: FetchResult) -> None:
    if not fetch.url or not fetch.url.startswith(("http://", "https://")):
        raise InvalidArgument(f"fetch url must be absolute http(s), got {fetch.url!r}")
    if not 100 <= fetch.status <= 999:
        raise InvalidArgument(f"{fetch.url}: HTTP status {fetch.status} out of range")
    if not fetch.agent_id:
        raise InvalidArgument(f"{fetch.url}: agent_id is empty")
    if fetch.truncated is not None and fetch.truncated not in TRUNCATED_REASONS:
        raise InvalidArgument(f"{fetch.url}: truncated must be one of {TRUNCATED_REASONS}, got {fetch.truncated!r}")
    if fetch.ended_at < fetch.started_at:
        raise InvalidArgument(f"{fetch.url}: ended_at is before started_at")


def _field(value: str) -> str:
    # Header values never carry line breaks into a record (a hostile server may send them).
    return value.replace("\r", " ").replace("\n", " ")


def _lines(pairs: Sequence[tuple[str, str]], names: bool = True) -> str:
    """"name: value\r\n" per pair, line breaks in the values (and in the names, with `names`)
    made spaces by _field. Joined as they are first: a text with no CR or LF but the pairs' own
    ends needs no _field call (issue 24: ~40 calls a page)."""
    text = "".join([f"{k}: {v}\r\n" for k, v in pairs])
    if text.count("\n") == len(pairs) == text.count("\r"):
        return text
    if names:
        return "".join([f"{_field(k)}: {_field(v)}\r\n" for k, v in pairs])
    return "".join([f"{k}: {_field(v)}\r\n" for k, v in pairs])


def _head_bytes(first_line: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """An HTTP head as stored in WARC (what warcio's StatusAndHeaders.to_bytes gives):
    ASCII, non-ASCII values percent-encoded, blank line at the end."""
    text = first_line + "\r\n" + _lines(headers) + "\r\n"
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return quote(text, safe="".join(chr(i) for i in range(32, 127)) + "\r\n").encode("ascii")


def _warc_record(fields: list[tuple[str, str]], content_type: str, block: bytes) -> bytes:
    """One uncompressed WARC/1.1 record: headers, block, and the two CRLFs that end it.

    Written by hand rather than through warcio's RecordBuilder: the agent builds three records
    per page and this is about 10x cheaper; warcio reads the result (tests check it)."""
    return _warc_head(fields, content_type, sha1_digest(block), len(block)) + block + b"\r\n\r\n"


def _warc_head(fields: list[tuple[str, str]], content_type: str, block_digest: str, block_length: int) -> bytes:
    """A record's WARC header lines and the blank line after them."""
    return (f"WARC/{WARC_VERSION}\r\n{_lines(fields, names=False)}WARC-Block-Digest: {block_digest}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {block_length}\r\n\r\n").encode("utf-8")


def build_capture(fetch: FetchResult, *, level: int = DEFAULT_LEVEL, record_id: str | None = None) -> Capture:
    """Build the response, request and metadata records of one fetch as separate gzip members.

    The request and metadata records name the response with WARC-Concurrent-To, so a revisit
    that storage writes under the same record id keeps those links valid.
    """
    _check(fetch)
    ids = _uuid4_urns(3)
    rid = record_id or ids[0]
    date = warc_date(fetch.started_at)
    body = fetch.body

    headers = _clean_headers(fetch.response_headers, fetch.body_decoded, len(body))
    status_line = f"{fetch.status} {fetch.reason}".rstrip()
    http_head = _head_bytes(f"{fetch.http_version} {status_line}", headers)
    content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
    # The payload's SHA-1, then the block's (HTTP head + payload) without joining the two.
    payload_digest = _b32_digest(hashlib.sha1(body).digest())
    block = hashlib.sha1(http_head)
    block.update(body)

    fields = [("WARC-Type", "response"), ("WARC-Record-ID", f"<{rid}>"), ("WARC-Date", date), ("WARC-Target-URI", fetch.url)]
    if fetch.ip:
        fields.append(("WARC-IP-Address", fetch.ip))
    if fetch.truncated:
        fields.append(("WARC-Truncated", fetch.truncated))
    fields.append(("WARC-Payload-Digest", payload_digest))
    response_head = _warc_head(fields, "application/http; msgtype=response", _b32_digest(block.digest()),
                               len(http_head) + len(body))
    # One copy of the page into the record (bytes.join), compressed in one call.
    response_raw = b"".join((response_head, http_head, body, b"\r\n\r\n"))

    req_head = _head_bytes(f"{fetch.method} {_request_target(fetch.url)} {fetch.http_version}", list(fetch.request_headers))
    fields = [("WARC-Type", "request"), ("WARC-Record-ID", f"<{ids[1]}>"), ("WARC-Date", date),
              ("WARC-Target-URI", fetch.url), ("WARC-Concurrent-To", f"<{rid}>")]
    if fetch.ip:
        fields.append(("WARC-IP-Address", fetch.ip))
    request_raw = _warc_record(fields, "application/http; msgtype=request", req_head)

    meta_fields = [
        ("agent-id", fetch.agent_id),
        ("fetch-start", date),
        ("fetch-end", warc_date(fetch.ended_at)),
        ("fetch-time-ms", f"{(fetch.ended_at - fetch.started_at) * 1000:.3f}"),
        ("payload-length", str(len(body))),
    ]
    if fetch.truncated:
        meta_fields.append(("truncated-reason", fetch.truncated))
    meta_fields.extend(fetch.extra_metadata)
    meta_body = _lines(meta_fields, names=False).encode("utf-8")
    fields = [("WARC-Type", "metadata"), ("WARC-Record-ID", f"<{ids[2]}>"), ("WARC-Date", date),
              ("WARC-Target-URI", fetch.url), ("WARC-Concurrent-To", f"<{rid}>")]
    metadata_raw = _warc_record(fields, "application/warc-fields", meta_body)

    return Capture(
        record_id=rid, url=fetch.url, agent_id=fetch.agent_id, fetched_at=fetch.started_at,
        warc_date=date, status=fetch.status, content_type=content_type,
        payload_digest=payload_digest, payload_length=len(body), ip=fetch.ip,
        truncated=fetch.truncated or "",
        response=gzip_member(response_raw, level), request=gzip_member(request_raw, level),
        metadata=gzip_member(metadata_raw, level), http_headers=http_head,
        raw_length=len(response_raw) + len(request_raw) + len(metadata_raw),
    )


def _request_target(url: str) -> str:
    """The request line's target: path and query (what urlsplit gives; tests compare the two).
    An http(s) URL without a fragment, whitespace or backslash (every canonical URL) is cut by
    index (wancrawl/urls.py split_target): urlsplit was a tenth of build_capture's time (issue 24)."""
    if ("#" in url or "\\" in url or "[" in url or "]" in url or " " in url or not url.isprintable()
            or not url.startswith(("http://", "https://"))):
        parts = urlsplit(url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    _, path, query = split_target(url)
    return f"{path}?{query}" if query else path


def build_revisit(
    *, record_id: str, url: str, warc_date_str: str, payload_digest: str, http_headers: bytes,
    refers_to_id: str, refers_to_url: str, refers_to_date: str, ip: str = "", level: int = DEFAULT_LEVEL,
    profile: str = REVISIT_PROFILE,
) -> bytes:
    """The gzip member of a revisit record (identical-payload-digest profile, or server-not-modified
    for a 304): the capture's HTTP head as the agent sent it, no payload.

    Storage calls this when a capture's payload is already archived; it reuses the capture's
    record id so the request and metadata records' WARC-Concurrent-To still resolve.
    """
    fields = [("WARC-Type", "revisit"), ("WARC-Record-ID", f"<{record_id}>"), ("WARC-Date", warc_date_str),
              ("WARC-Target-URI", url)]
    if ip:
        fields.append(("WARC-IP-Address", ip))
    fields += [("WARC-Profile", profile), ("WARC-Refers-To", f"<{refers_to_id}>"),
               ("WARC-Refers-To-Target-URI", refers_to_url), ("WARC-Refers-To-Date", refers_to_date),
               ("WARC-Payload-Digest", payload_digest)]
    return gzip_member(_warc_record(fields, "application/http; msgtype=response", http_headers), level)


def warcinfo_member(filename: str, info: dict[str, str]) -> bytes:
    """The gzip member of a warcinfo record that opens each WARC file."""
    body = "".join(f"{k}: {_field(v)}\r\n" for k, v in info.items()).encode("utf-8")
    fields = [("WARC-Type", "warcinfo"), ("WARC-Record-ID", f"<urn:uuid:{uuid.uuid4()}>"),
              ("WARC-Date", warc_date(time.time())), ("WARC-Filename", filename)]
    return gzip_member(_warc_record(fields, "application/warc-fields", body))
