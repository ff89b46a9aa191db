"""The storage core: validate, deduplicate, append and index captures; read them back. Blocking; no gRPC."""

from __future__ import annotations

import io
import json
import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator

from wancrawl import urls, warcrecords
from wancrawl.checks import shown
from wancrawl.errors import InvalidArgument, NotFound, Unavailable
from wancrawl.v1 import storage_pb2

from storage import validate
from storage.config import StorageSettings
from storage.index import Index, Row
from storage.sink import LocalSink, WarcSink

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    batch_id: str
    stored: int = 0
    revisits: int = 0
    duplicates: int = 0
    bytes_written: int = 0
    rejected: list[tuple[int, str, str]] = field(default_factory=list)  # (index, record_id, reason)


# A payload holder a revisit can refer to: (record id, URL, WARC-Date, payload digest).
Ref = tuple[str, str, str, str]


def _record_payload_digest(member: bytes) -> str:
    """WARC-Payload-Digest of a gzip-member record, read from its first KiB of headers ("" if none)."""
    try:
        head = zlib.decompressobj(wbits=31).decompress(member[:65536], 8192)
    except zlib.error:
        return ""
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"warc-payload-digest":
            return value.strip().decode("ascii", "replace")
    return ""


def surt(url: str) -> str:
    """The SURT key pywb sorts CDXJ lines by: reversed host, ')' and the path with query."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host.startswith("www.") and host.count(".") > 1:
        host = host[4:]
    key = ",".join(reversed(host.split("."))) if not urls.ip_literal(host) else host
    if parts.port and parts.port != urls.DEFAULT_PORTS.get(parts.scheme):
        key += f":{parts.port}"
    path = (parts.path or "/").lower()
    query = "&".join(sorted(parts.query.split("&"))).lower() if parts.query else ""
    return f"{key}){path}" + (f"?{query}" if query else "")


def open_sink(settings: StorageSettings) -> WarcSink:
    """The WARC sink `warc.sink` names (storage/sink.py)."""
    if settings.warc.sink == "s3":
        from storage.s3sink import S3Sink  # boto3 is imported only when asked for

        return S3Sink(settings.object_store, settings.warc.prefix, settings.warc.max_file_bytes)
    return LocalSink(settings.warc_dir(), settings.warc.prefix, settings.warc.max_file_bytes,
                     fsync=settings.ingest.fsync == "always")


def timestamp14(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y%m%d%H%M%S")


class Store:
    """Owns the WARC directory and the index. Not thread-safe for writes: one writer thread."""

    def __init__(self, settings: StorageSettings, *, readonly: bool = False, sink: WarcSink | None = None):
        # readonly: for CLI reads beside a running server; no recovery (it would cut the
        # server's file being written) and no writes.
        self.settings = settings
        self.readonly = readonly
        self.warc_dir = settings.warc_dir()  # the local sink's directory
        if not settings.index.url:
            Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
        durable = settings.ingest.fsync == "always"
        self.index = Index(settings.index_url(), schema=settings.index.schema, durable=durable,
                           sqlite_cache_mb=settings.index.sqlite_cache_mb,
                           sqlite_wal_autocheckpoint=settings.index.sqlite_wal_autocheckpoint)
        # The sink reads any writer's files or objects; only a writable store appends through it.
        self.sink: WarcSink = sink if sink is not None else open_sink(settings)
        self.writer: WarcSink | None = None
        self.recovery: list[str] = []
        if readonly:
            return
        self.recovery = self.sink.recover(self.index)
        self.writer = self.sink

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.index.close()

    # -- ingest --------------------------------------------------------------------------------
    def ingest(self, batches: Sequence[storage_pb2.PageBatch]) -> list[BatchResult]:
        """Store a group of batches: one append run, one fsync, one index transaction."""
        if self.writer is None:
            raise Unavailable("store opened read-only")
        cfg = self.settings.ingest
        results = [BatchResult(b.batch_id) for b in batches]
        todo: list[tuple[BatchResult, storage_pb2.Capture, str, str, bool]] = []  # (result, capture, canonical, host, dedupable)
        for b, res in zip(batches, results):
            for i, c in enumerate(b.captures):
                try:
                    canonical, host = validate.capture(c, cfg.validate == "full")
                except InvalidArgument as exc:
                    res.rejected.append((i, c.record_id, f"batch {shown(b.batch_id)} capture {i} ({shown(c.url)}): {exc}"))
                    continue
                todo.append((res, c, canonical, host, self._dedupable(c)))
        if not todo:
            return results

        existing = self.index.existing_ids(t[1].record_id for t in todo)
        eligible = [c.payload_digest for _, c, _, _, dedupable in todo if dedupable]
        originals = self.index.originals(set(eligible)) if eligible else {}
        # The same URL's own past (issue 26): a 304 refers to the latest capture of its URL with the
        # digest the agent names; a 200 whose payload equals its URL's latest capture is a revisit
        # of it whatever its size, when the agent flagged it a refetch (a first capture asks the
        # index nothing). Within the group, earlier captures count as indexed.
        unchanged = [t[2] for t in todo if t[1].status == 200 and self._same_url_dedupable(t[1])]
        latest: dict[str, Ref] = {u: r for u, row in self.index.latest(unchanged).items()
                                  if (r := self._holder(row)) is not None} if unchanged else {}
        asked = {(t[2], t[1].payload_digest) for t in todo if t[1].status == 304 and t[1].http_headers}
        latest_nm: dict[tuple[str, str], Ref] = {k: r for k, row in self.index.latest_with_digest(asked).items()
                                                 if (r := self._holder(row)) is not None} if asked else {}

        rows: list[dict] = []
        self.writer.begin()
        try:
            for res, c, canonical, host, dedupable in todo:
                if c.record_id in existing:
                    res.duplicates += 1
                    continue
                existing.add(c.record_id)
                digest, profile = c.payload_digest, warcrecords.REVISIT_PROFILE
                orig: Ref | None = None
                if c.status == 304 and c.http_headers:
                    orig, profile = latest_nm.get((canonical, digest)), warcrecords.NOT_MODIFIED_PROFILE
                elif c.status == 200 and c.http_headers and self._same_url_dedupable(c):
                    prev = latest.get(canonical)
                    orig = prev if prev is not None and prev[3] == digest else None
                if orig is None and c.status != 304 and dedupable and c.http_headers:
                    orig = originals.get(digest)
                if orig is not None:
                    first = warcrecords.build_revisit(
                        record_id=c.record_id, url=c.url, warc_date_str=c.warc_date,
                        payload_digest=digest, http_headers=c.http_headers,
                        refers_to_id=orig[0], refers_to_url=orig[1], refers_to_date=orig[2], ip=c.ip, profile=profile,
                    )
                    record_type, refers_to = "revisit", orig[0]
                    res.revisits += 1
                    if c.status == 200:
                        latest[canonical] = orig
                else:
                    first, record_type, refers_to = c.response, "response", None
                    if c.status == 304:
                        # No earlier capture to refer to: the 304 is kept as it came, indexed with
                        # its record's own payload digest (of an empty body), never as a payload holder.
                        digest = _record_payload_digest(c.response) or digest
                    else:
                        if dedupable:
                            originals.setdefault(digest, (c.record_id, c.url, c.warc_date, digest))
                        if c.status == 200:
                            latest[canonical] = (c.record_id, c.url, c.warc_date, digest)
                if c.status == 200 or (c.status == 304 and orig is not None):
                    holder = orig if orig is not None else (c.record_id, c.url, c.warc_date, digest)
                    latest_nm[(canonical, digest)] = holder
                group = first + c.request + c.metadata
                name, offset = self.writer.append(group)
                res.stored += 1
                res.bytes_written += len(group)
                rows.append({
                    "record_id": c.record_id, "url": c.url, "canonical_url": canonical, "host": host,
                    "agent_id": c.agent_id, "fetched_at": c.fetched_at, "warc_date": c.warc_date,
                    "status": c.status, "content_type": c.content_type[:255],
                    "payload_digest": digest, "payload_length": c.payload_length,
                    "record_type": record_type, "refers_to": refers_to, "truncated": c.truncated[:32],
                    "ip": c.ip[:64], "warc_file": name, "warc_offset": offset, "warc_length": len(first),
                    "group_length": len(group), "raw_length": c.raw_length,
                })
            durable = self.writer.sync()
            self.index.commit(rows, durable.files, durable.parts)
        except Exception as exc:
            self.writer.rollback()
            if isinstance(exc, (InvalidArgument, Unavailable)):
                raise
            raise Unavailable(f"storing {len(rows)} captures failed, nothing acknowledged: {exc}") from exc
        # Indexed: now the sink may publish (an object store completes objects here).
        self.writer.committed()
        return results

    def _same_url_dedupable(self, c: storage_pb2.Capture) -> bool:
        """A 200 compared with its own URL's latest capture: a refetch by the agent's flag, dedup on
        and the body whole (no size floor). An unflagged capture is taken for a first one: only
        the digest index (`_dedupable`, above dedup_min_bytes) can make it a revisit."""
        return c.refetch and self.settings.ingest.dedup and not c.truncated

    def _holder(self, row: Row) -> Ref | None:
        """The capture holding the payload of `row`: itself, or the record a revisit refers to."""
        if row.record_type == "revisit":
            orig = self.index.get(row.refers_to) if row.refers_to else None
            if orig is None or orig.record_type != "response":
                return None
            return orig.record_id, orig.url, orig.warc_date, row.payload_digest
        if row.status == 304 or row.truncated:
            return None  # a 304 kept as a response holds no payload; a truncated body is not the page
        return row.record_id, row.url, row.warc_date, row.payload_digest

    def _dedupable(self, c: storage_pb2.Capture) -> bool:
        cfg = self.settings.ingest
        return cfg.dedup and not c.truncated and c.payload_length >= cfg.dedup_min_bytes

    # -- reads ----------------------------------------------------------------------------------
    def find(self, url: str = "", at: float | None = None, record_id: str = "") -> Row:
        if record_id:
            row = self.index.get(record_id)
            if row is None:
                raise NotFound(f"no capture with record id {record_id!r}")
            return row
        canonical = urls.canonicalize(url)
        row = self.index.find(canonical, at)
        if row is None:
            raise NotFound(f"no capture of {canonical}")
        return row

    def history(self, url: str, limit: int = 0) -> list[Row]:
        """Every capture of the URL (canonicalised) over time, oldest first; the last `limit` if > 0."""
        return self.index.history(urls.canonicalize(url), limit)

    def lookup(self, asked: list[str]) -> dict[str, set[int]]:
        """URL as asked -> the statuses of its captures, for the URLs that have any."""
        canonical = {}
        for u in asked:
            try:
                canonical[u] = urls.canonicalize(u)
            except InvalidArgument:
                continue  # not a URL storage could hold
        found = self.index.statuses(canonical.values())
        return {u: found[c] for u, c in canonical.items() if c in found}

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        return self.sink.read_range(name, offset, length)

    def get(self, url: str = "", at: float | None = None, record_id: str = "") -> tuple[Row, bytes, bytes]:
        """(index row, HTTP head bytes, payload) of a capture; a revisit's payload comes from its original."""
        row = self.find(url, at, record_id)
        head, body = self._load(row)
        if row.record_type == "revisit" and row.refers_to:
            orig = self.index.get(row.refers_to)
            if orig is None:
                raise NotFound(f"revisit {row.record_id} refers to {row.refers_to}, which is not indexed")
            _, body = self._load(orig)
        return row, head, body

    def _load(self, row: Row) -> tuple[bytes, bytes]:
        data = self.read_range(row.warc_file, row.warc_offset, row.warc_length)
        for rec in ArchiveIterator(io.BytesIO(data)):
            head = rec.http_headers.to_bytes() if rec.http_headers else b""
            return head, rec.content_stream().read()
        raise NotFound(f"{row.warc_file}@{row.warc_offset}: no WARC record there")

    def stats(self, top: int = 20) -> dict[str, Any]:
        return self.index.stats(top)

    # -- export and verification ---------------------------------------------------------------------
    def cdxj_lines(self) -> list[str]:
        lines = []
        for row in self.index.iter_rows():
            r = row
            if row.record_type == "revisit" and row.status == 304 and row.refers_to:
                # A 304 (server-not-modified) revisit keeps the 304's own head in the WARC (the
                # protocol's record); for replay its line names the capture it refers to, so pywb
                # serves the earlier capture at this time (a 304 head would replay as an empty 304).
                r = self.index.get(row.refers_to) or row
            mime = "warc/revisit" if r.record_type == "revisit" else (r.content_type.split(";")[0].strip() or "unk")
            # "sha1:BASE32", as the index and WARC-Payload-Digest hold it and as pywb's indexer
            # (cdxj-indexer) writes it: tests/test_storage_core.py compares the two line by line.
            digest = r.payload_digest if ":" in r.payload_digest else f"sha1:{r.payload_digest}"
            fields = {"url": r.url, "mime": mime, "status": str(r.status), "digest": digest,
                      "length": str(r.warc_length), "offset": str(r.warc_offset), "filename": self.sink.location(r.warc_file)}
            fields["url"] = row.url
            lines.append(f"{surt(row.canonical_url)} {timestamp14(row.fetched_at)} {json.dumps(fields)}")
        lines.sort()
        return lines

    def export_cdxj(self, out: IO[str]) -> int:
        lines = self.cdxj_lines()
        for line in lines:
            out.write(line + "\n")
        return len(lines)

    def verify(self) -> dict[str, Any]:
        """Re-read every WARC file; check each record's digests and that the files hold exactly
        the records the index names (warcinfo, then per capture response/revisit, request, metadata)."""
        by_file: dict[str, dict[int, Row]] = {}
        for r in self.index.iter_rows():
            by_file.setdefault(r.warc_file, {})[r.warc_offset] = r
        files = self.index.file_rows()
        problems: list[str] = []
        checked = records = 0
        for name in sorted(set(files) | set(by_file)):
            expect = by_file.get(name, {})
            try:
                stream = self.sink.open(name)
            except NotFound as exc:
                problems.append(f"{name}: missing ({len(expect)} captures indexed): {exc}")
                continue
            seen: set[int] = set()
            group_end = 0
            with stream as fh:
                it = ArchiveIterator(fh, check_digests=True)
                try:
                    for rec in it:
                        rec.content_stream().read()
                        offset = it.get_record_offset()
                        records += 1
                        rid = (rec.rec_headers.get_header("WARC-Record-ID") or "").strip("<>")
                        if rec.digest_checker.passed is False:
                            problems.append(f"{name}@{offset}: {rec.rec_type} {rid}: {'; '.join(rec.digest_checker.problems)}")
                        row = expect.get(offset)
                        if row is not None:
                            seen.add(offset)
                            checked += 1
                            group_end = offset + row.group_length
                            if rid != row.record_id or rec.rec_type != row.record_type:
                                problems.append(f"{name}@{offset}: index says {row.record_type} {row.record_id}, file has {rec.rec_type} {rid}")
                            if rec.rec_headers.get_header("WARC-Payload-Digest") != row.payload_digest:
                                problems.append(f"{name}@{offset}: payload digest differs from the index")
                        elif offset == 0 and rec.rec_type == "warcinfo":
                            pass
                        elif offset >= group_end:
                            problems.append(f"{name}@{offset}: {rec.rec_type} record not named by the index")
                except Exception as exc:  # noqa: BLE001 - a corrupt file must not stop the check
                    problems.append(f"{name}: unreadable after {records} records: {type(exc).__name__}: {exc}")
            for off in sorted(set(expect) - seen):
                problems.append(f"{name}@{off}: indexed capture {expect[off].record_id} not found in the file")
        return {"files": len(set(files) | set(by_file)), "records": records, "captures_checked": checked,
                "problems": problems, "ok": not problems}



