"""wancrawl.warcrecords: agent-built gzip-member WARC/1.1 records that standard tools read."""

from __future__ import annotations

import gzip
import io
import zlib

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage.testing import fetch_result
from wancrawl.errors import InvalidArgument
from wancrawl.warcrecords import FetchResult, build_capture, build_revisit, sha1_digest


def read_all(data: bytes):
    out = []
    for rec in ArchiveIterator(io.BytesIO(data), check_digests="raise"):
        out.append((rec, rec.content_stream().read()))
    return out


def test_capture_is_three_gzip_members_warcio_reads():
    body = b"<html>" + b"x" * 5000 + b"</html>"
    c = build_capture(fetch_result("http://a.example/p?q=1", body, ip="127.3.2.1", truncated="length"))
    for member in (c.response, c.request, c.metadata):
        d = zlib.decompressobj(31)
        d.decompress(member)
        assert d.eof and not d.unused_data  # exactly one member each
    recs = read_all(c.response + c.request + c.metadata)
    (resp, payload), (req, _), (meta, meta_body) = recs
    assert [r.rec_type for r, _ in recs] == ["response", "request", "metadata"]
    assert resp.rec_headers.protocol == "WARC/1.1"
    assert payload == body and c.payload_digest == sha1_digest(body)
    assert resp.rec_headers.get_header("WARC-Payload-Digest") == c.payload_digest
    assert resp.rec_headers.get_header("WARC-IP-Address") == "127.3.2.1"
    assert resp.rec_headers.get_header("WARC-Truncated") == "length"
    assert resp.rec_headers.get_header("WARC-Record-ID") == f"<{c.record_id}>"
    assert req.rec_headers.get_header("WARC-Concurrent-To") == f"<{c.record_id}>"
    assert req.http_headers.protocol == "GET" and req.http_headers.get_header("User-Agent") == "wancrawl/0.1"
    assert meta.rec_headers.get_header("Content-Type") == "application/warc-fields"
    assert b"agent-id: agent-1\r\n" in meta_body and b"fetch-time-ms: 42.000" in meta_body
    assert b"truncated-reason: length" in meta_body
    assert c.raw_length == len(gzip.decompress(c.response + c.request + c.metadata))
    assert c.content_type == "text/html; charset=utf-8" and c.status == 200


def test_decoded_body_gets_honest_headers():
    f = FetchResult(url="http://a.example/", status=200, body=b"hello", agent_id="a", started_at=1.0, ended_at=2.0,
                    response_headers=[("Content-Encoding", "gzip"), ("Content-Length", "25"), ("Transfer-Encoding", "chunked")],
                    body_decoded=True)
    (resp, payload), *_ = read_all(build_capture(f).response)
    h = resp.http_headers
    assert payload == b"hello" and h.get_header("Content-Length") == "5"
    assert h.get_header("Content-Encoding") is None and h.get_header("X-Wancrawl-Orig-Content-Encoding") == "gzip"
    assert h.get_header("Transfer-Encoding") is None


def test_line_breaks_in_header_names_and_values_become_spaces():
    # A hostile server's CR and LF never reach a record's line structure: in the HTTP head (names
    # and values) and in the metadata's values they are spaces; warcio reads every record.
    f = FetchResult(url="http://a.example/", status=200, body=b"hi", agent_id="a\r\nx", started_at=1.0, ended_at=2.0,
                    response_headers=[("X-Evil", "one\r\nInjected: yes"), ("Bad\nName", "v"), ("Server", "lab\r")],
                    extra_metadata=[("note", "a\nb")])
    c = build_capture(f)
    (resp, payload), (req, _), (meta, meta_body) = read_all(c.response + c.request + c.metadata)
    assert c.http_headers == b"HTTP/1.1 200\r\nX-Evil: one  Injected: yes\r\nBad Name: v\r\nServer: lab \r\n\r\n"
    assert resp.http_headers.get_header("Injected") is None and payload == b"hi"
    assert b"agent-id: a  x\r\n" in meta_body and b"note: a b\r\n" in meta_body


def test_revisit_built_from_headers():
    c = build_capture(fetch_result("http://a.example/", b"y" * 1000))
    member = build_revisit(record_id="urn:uuid:r", url=c.url, warc_date_str=c.warc_date,
                                    payload_digest=c.payload_digest, http_headers=c.http_headers,
                                    refers_to_id=c.record_id, refers_to_url=c.url, refers_to_date=c.warc_date)
    (rec, payload), = read_all(member)
    assert rec.rec_type == "revisit" and payload == b""
    assert rec.http_headers.get_statuscode() == "200"
    assert rec.rec_headers.get_header("WARC-Refers-To") == f"<{c.record_id}>"
    assert rec.rec_headers.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
    assert rec.rec_headers.get_header("WARC-Refers-To-Target-URI") == c.url


@pytest.mark.parametrize("kw, msg", [
    (dict(url="ftp://a.example/"), "absolute http"),
    (dict(status=42), "status"),
    (dict(agent_id=""), "agent_id"),
    (dict(truncated="because"), "truncated"),
    (dict(ended_at=0.5), "before"),
])
def test_bad_fetch_results_are_refused(kw, msg):
    base = dict(url="http://a.example/", status=200, response_headers=[], body=b"", agent_id="a", started_at=1.0, ended_at=2.0)
    base.update(kw)
    with pytest.raises(InvalidArgument, match=msg):
        build_capture(FetchResult(**base))


def test_sha1_digest_is_base32_of_sha1():
    # The table-driven base32 against the standard library's, over many random digests.
    import base64
    import hashlib
    import random

    rng = random.Random(7)
    for n in range(3000):
        data = rng.randbytes(n % 97)
        assert sha1_digest(data) == "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def test_warc_date_is_what_strftime_writes():
    # isoformat, not strftime (issue 24): the same text for any time a fetch may carry (0..1e11,
    # fields.py's bound), microseconds rounded the same way, whole seconds with ".000000".
    import random
    from datetime import datetime, timezone

    from wancrawl.warcrecords import warc_date

    rng = random.Random(11)
    times = [0.0, 1e11, 1_700_000_000.0, 1_700_000_000.9999995, 951_782_400.5]
    times += [rng.choice([rng.uniform(0, 1e11), rng.uniform(1.7e9, 1.8e9), float(rng.randint(0, 2**31)),
                          rng.randint(0, 10**11) / 1e6]) for _ in range(20_000)]
    for t in times:
        assert warc_date(t) == datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), t


def test_request_target_is_what_urlsplit_gives():
    # The request line's target is cut by hand for plain http(s) URLs (issue 24); urlsplit is the
    # reference for every URL, odd ones too (fragments, brackets, backslashes, controls), errors included.
    import random
    from urllib.parse import urlsplit

    from wancrawl.warcrecords import _request_target

    def reference(url):
        parts = urlsplit(url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def outcome(f, url):
        try:
            return f(url)
        except ValueError:
            return ValueError

    rng = random.Random(3)
    alphabet = "ab/?#:@.%&=\\ \t\x00\u00e9HTtp[]"
    urls = ["http://h", "http://h?", "http://h?q", "http://h/p?", "https://h:8080/a/b?c=d&e", "http://h//x?y?z"]
    urls += [rng.choice(["http://", "https://", "HTTP://", "http:/", "ftp://"]) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
             for _ in range(50_000)]
    for url in urls:
        assert outcome(_request_target, url) == outcome(reference, url), url


def test_record_ids_are_random_version_4_uuids():
    # The three record ids of a capture come from one os.urandom call (not uuid.uuid4): each must
    # still be what the standard library parses as a version 4, RFC 4122 UUID, and all distinct.
    import re
    import uuid

    ids = []
    for _ in range(500):
        c = build_capture(fetch_result("http://a.example/p", b"<html></html>"))
        for member in (c.response, c.request, c.metadata):
            ids += re.findall(rb"WARC-Record-ID: <urn:uuid:([^>]*)>", gzip.decompress(member))
    assert len(ids) == 1500 and len(set(ids)) == 1500
    for raw in ids:
        u = uuid.UUID(raw.decode())
        assert u.version == 4 and u.variant == uuid.RFC_4122 and str(u) == raw.decode()
