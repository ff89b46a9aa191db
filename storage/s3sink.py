"""WARC objects in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, SeaweedFS) via boto3.

Each writer appends to its own multipart uploads under <key_prefix><writer_id>/ (no two writers
write one object). Per write group (storage/sink.py):

    append()  -> bytes go to the open object's buffer (a new object starts with its warcinfo)
    sync()    -> the buffer is uploaded as the object's next part: durable, not yet readable
    [the index commits the records and the part (storage_object_parts) in one transaction]
    committed() -> an object is completed (readable) if its last part is under S3's 5 MiB floor
                   (no part may follow it), it reached warc.max_file_bytes, or it has been
                   open max_open_seconds
    rollback()  -> the part is forgotten (its number is never reused, it is never completed)

A crash anywhere leaves uploaded parts the index may or may not name; recover() completes each
of the writer's open uploads with exactly the parts the index names (aborting the upload if it
names none) and sets aside completed objects the index does not know, so the bucket holds
exactly what the index names, as the local directory does after warcfile.recover().
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from wancrawl import warcrecords
from wancrawl.errors import NotFound, Unavailable

from storage.config import MIN_PART_BYTES, ObjectStoreSettings
from storage.sink import Durable, IndexView
from storage.warcfile import SUFFIX, needs_rotation

log = logging.getLogger(__name__)


def make_client(cfg: ObjectStoreSettings) -> Any:
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {"region_name": cfg.region}
    if cfg.endpoint:
        kwargs["endpoint_url"] = cfg.endpoint
    if cfg.access_key_id:
        kwargs["aws_access_key_id"] = cfg.access_key_id
        kwargs["aws_secret_access_key"] = cfg.secret_access_key
    # No SHA-256 of every part's body for the signature (botocore computes it over plain http,
    # SeaweedFS or MinIO on a private network: half the client's CPU per uploaded byte): the body
    # is checked by the CRC32 checksum botocore sends with each part instead, as over https by default.
    s3: dict[str, Any] = {"payload_signing_enabled": False}
    if cfg.endpoint:
        s3["addressing_style"] = "path"
    conf = Config(s3=s3, connect_timeout=cfg.timeout, read_timeout=cfg.timeout,
                  retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", config=conf, **kwargs)


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


@dataclass
class _Object:
    key: str
    upload_id: str
    header_len: int
    opened_at: float
    size: int = 0  # bytes appended: uploaded parts + buffer
    parts: list[tuple[int, str, int]] = field(default_factory=list)  # committed (number, etag, size)
    pending: list[tuple[int, str, int]] = field(default_factory=list)  # uploaded this group
    buffer: list[bytes] = field(default_factory=list)  # appended, not uploaded: joined once per part
    next_part: int = 1
    closing: bool = False  # rotated away from: completed after the commit, never appended to


class S3Sink:
    """One writer's WARC objects in a bucket, and reads of every writer's objects."""

    def __init__(self, cfg: ObjectStoreSettings, prefix: str, max_bytes: int, *, client: Any = None):
        self.cfg = cfg
        self.bucket = cfg.bucket
        self.own = f"{cfg.key_prefix}{cfg.writer_id}/"
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.info = {"software": "wancrawl-storage", "format": "WARC File Format 1.1", "writer": cfg.writer_id}
        self.s3 = client if client is not None else make_client(cfg)
        self.current: _Object | None = None
        self._to_complete: list[_Object] = []  # completion failed: retried at the next commit
        self._touched: dict[str, _Object] = {}
        self._created: list[_Object] = []
        self._before: _Object | None = None
        self._serial = 0

    def _ensure_bucket(self) -> None:
        try:
            self.s3.head_bucket(Bucket=self.bucket)
        except Exception:  # noqa: BLE001 - missing or not ours: try to create, report what fails
            try:
                self.s3.create_bucket(Bucket=self.bucket)
            except Exception as exc:  # noqa: BLE001
                if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise Unavailable(f"object store {self.cfg.endpoint or 'AWS'}: bucket {self.bucket}: {exc}") from None

    # -- recovery ------------------------------------------------------------------------------
    def recover(self, index: IndexView) -> list[str]:
        """At a writer's start (readers never touch the bucket before they read)."""
        if self.cfg.create_bucket:
            self._ensure_bucket()
        actions: list[str] = []
        known = index.file_rows()
        parts = index.object_parts(f"{self.cfg.writer_id}/")
        try:
            uploads = self._list_uploads()
            for key, upload_id in uploads:
                mine = sorted(parts.get((self._name(key), upload_id), []))
                if mine:
                    self.s3.complete_multipart_upload(
                        Bucket=self.bucket, Key=key, UploadId=upload_id,
                        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e, _ in mine]})
                    actions.append(f"completed {key} with the {len(mine)} parts the index names")
                else:
                    self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
                    actions.append(f"aborted the upload of {key} (no part indexed: never acknowledged)")
            for key in self._list_keys(self.own):
                if key.endswith(SUFFIX) and self._name(key) not in known:
                    # Set aside, not deleted: an index pointed at the wrong bucket must not destroy WARCs.
                    self.s3.copy_object(Bucket=self.bucket, Key=key + ".orphan", CopySource={"Bucket": self.bucket, "Key": key})
                    self.s3.delete_object(Bucket=self.bucket, Key=key)
                    actions.append(f"set aside {key} as .orphan (not in the index: never committed)")
        except Unavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - botocore raises many types
            raise Unavailable(f"object store recovery of {self.own}: {exc}") from None
        for a in actions:
            log.warning("recovery: %s", a)
        return actions

    def _list_uploads(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.own}
        while True:
            resp = self.s3.list_multipart_uploads(**kwargs)
            out.extend((u["Key"], u["UploadId"]) for u in resp.get("Uploads", []))
            if not resp.get("IsTruncated"):
                return out
            kwargs.update(KeyMarker=resp["NextKeyMarker"], UploadIdMarker=resp["NextUploadIdMarker"])

    def _list_keys(self, prefix: str) -> Iterator[str]:
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def _name(self, key: str) -> str:
        """The index's name of an object (its key without the deployment's key_prefix)."""
        return key[len(self.cfg.key_prefix):]

    def _key(self, name: str) -> str:
        return self.cfg.key_prefix + name

    # -- write group ---------------------------------------------------------------------------
    def begin(self) -> None:
        self._touched.clear()
        self._created.clear()
        self._before = self.current

    def append(self, data: bytes) -> tuple[str, int]:
        try:
            cur = self.current
            if cur is None or needs_rotation(cur.size, cur.header_len, len(data), self.max_bytes):
                cur = self._rotate()
            offset = cur.size
            cur.buffer.append(data)
            cur.size += len(data)
            self._touched[cur.key] = cur
            return self._name(cur.key), offset
        except Unavailable:
            raise
        except Exception as exc:  # noqa: BLE001
            raise Unavailable(f"object store: {exc}") from None

    def _rotate(self) -> _Object:
        if self.current is not None:
            self.current.closing = True
            self._touched[self.current.key] = self.current
        self._serial += 1
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        name = f"{self.cfg.writer_id}/{self.prefix}-{stamp}-{self._serial:05d}-{time.time_ns() % 10**9:09d}{SUFFIX}"
        key = self._key(name)
        upload_id = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key, ContentType="application/warc")["UploadId"]
        header = warcrecords.warcinfo_member(name.rsplit("/", 1)[-1], self.info)
        obj = _Object(key, upload_id, len(header), time.time())
        obj.buffer.append(header)
        obj.size = len(header)
        self.current = obj
        self._created.append(obj)
        self._touched[key] = obj
        return obj

    def sync(self) -> Durable:
        """Upload every touched object's buffer as its next part."""
        durable = Durable()
        try:
            for obj in self._touched.values():
                if obj.buffer:
                    n = obj.next_part
                    obj.next_part += 1  # never reused, even if this group rolls back
                    body = b"".join(obj.buffer)
                    etag = self.s3.upload_part(Bucket=self.bucket, Key=obj.key, UploadId=obj.upload_id, PartNumber=n, Body=body)["ETag"]
                    obj.pending.append((n, etag, len(body)))
                    obj.buffer.clear()
                    durable.parts.append({"object": self._name(obj.key), "upload_id": obj.upload_id, "part_number": n,
                                          "etag": etag, "size": len(body)})
        except Exception as exc:  # noqa: BLE001
            raise Unavailable(f"object store: uploading a part failed: {exc}") from None
        durable.files = [{"name": self._name(o.key), "created_at": o.opened_at, "warcinfo_length": o.header_len} for o in self._created]
        return durable

    def committed(self) -> None:
        now = time.time()
        for obj in self._touched.values():
            obj.parts.extend(obj.pending)
            obj.pending.clear()
            small = bool(obj.parts) and obj.parts[-1][2] < MIN_PART_BYTES
            if obj.closing or small or obj.size >= self.max_bytes or now - obj.opened_at >= self.cfg.max_open_seconds:
                if obj is self.current:
                    self.current = None
                self._to_complete.append(obj)
        self._touched.clear()
        self._created.clear()
        self._complete_waiting()

    def _complete_waiting(self) -> None:
        waiting, self._to_complete = self._to_complete, []
        for obj in waiting:
            try:
                self.s3.complete_multipart_upload(
                    Bucket=self.bucket, Key=obj.key, UploadId=obj.upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e, _ in obj.parts]})
            except Exception as exc:  # noqa: BLE001 - its records are indexed and durable: retry later
                log.warning("completing %s failed (%s); retried at the next commit", obj.key, exc)
                self._to_complete.append(obj)

    def rollback(self) -> None:
        for obj in self._touched.values():
            obj.pending.clear()
            obj.buffer.clear()
            obj.size = sum(size for _, _, size in obj.parts)  # the first part holds the warcinfo
            obj.closing = False
        for obj in self._created:
            try:
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=obj.key, UploadId=obj.upload_id)
            except Exception as exc:  # noqa: BLE001 - recovery aborts it at the next start
                log.warning("aborting the upload of %s failed: %s", obj.key, exc)
        self.current = self._before
        if self.current is not None and self.current in self._created:
            self.current = None
        self._touched.clear()
        self._created.clear()

    def close(self) -> None:
        if self.current is not None and self.current.parts:
            self._to_complete.append(self.current)
        self.current = None
        self._complete_waiting()

    # -- read ----------------------------------------------------------------------------------
    def location(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        data = self._get(name, f"bytes={offset}-{offset + length - 1}").read()
        if len(data) != length:
            raise NotFound(f"{self.location(name)}: record at {offset} is cut short ({len(data)} of {length} bytes)")
        return data

    def open(self, name: str) -> BinaryIO:
        return self._get(name, None)  # botocore's StreamingBody: a readable, closable stream

    def _get(self, name: str, byte_range: str | None) -> Any:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(name)}
        if byte_range:
            kwargs["Range"] = byte_range
        try:
            return self.s3.get_object(**kwargs)["Body"]
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in ("NoSuchKey", "404"):
                raise NotFound(f"{self.location(name)} is not readable yet (its upload is still open: completed within "
                               f"{self.cfg.max_open_seconds:g} s) or missing") from None
            raise Unavailable(f"object store: reading {self.location(name)}: {exc}") from None

    def names(self) -> Iterator[str]:
        for key in self._list_keys(self.cfg.key_prefix):
            if key.endswith(SUFFIX):
                yield self._name(key)
