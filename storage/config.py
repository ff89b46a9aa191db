"""Storage settings: a TOML file read into typed dataclasses (wancrawl.config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wancrawl import config
from wancrawl.config import TomlWritable
from wancrawl.runtime.eventloop import check as check_event_loop
from wancrawl.grpcutil import TlsSettings

FSYNC_POLICIES = ("always", "os")


@dataclass(frozen=True)
class IndexSettings(TomlWritable):
    # SQLAlchemy URL; "" means SQLite at <data_dir>/index.sqlite.
    url: str = ""
    # PostgreSQL schema holding the tables (created if missing); None = the default schema.
    schema: str | None = None
    # SQLite only. Its page cache per connection (MB; SQLite's default is 2) and the WAL pages
    # between automatic checkpoints (SQLite's default 1,000): an index much larger than the
    # cache reads and rewrites a leaf page of each random-key index (record id, digest, URL)
    # per capture; see docs/storage.md, "Ingest as the SQLite index grows".
    sqlite_cache_mb: int = 64
    sqlite_wal_autocheckpoint: int = 16_384

    def __post_init__(self) -> None:
        if self.sqlite_cache_mb < 1:
            raise ValueError("index.sqlite_cache_mb must be >= 1")
        if self.sqlite_wal_autocheckpoint < 1:
            raise ValueError("index.sqlite_wal_autocheckpoint must be >= 1")


@dataclass(frozen=True)
class WarcSettings(TomlWritable):
    dir: str = ""  # "" means <data_dir>/warcs
    prefix: str = "wancrawl"
    max_file_bytes: int = 1_000_000_000
    # Where WARC files go: "local" (the directory above) or "s3" (S3-compatible object storage,
    # the [object_store] table; docs/storage.md "Object storage").
    sink: str = "local"

    def __post_init__(self) -> None:
        if self.max_file_bytes < 4096:
            raise ValueError("warc.max_file_bytes must be at least 4096")
        if self.sink not in ("local", "s3"):
            raise ValueError(f"warc.sink must be 'local' or 's3', got {self.sink!r}")


MIN_PART_BYTES = 5 * 1024 * 1024  # S3's floor for every part of a multipart upload but the last


@dataclass(frozen=True)
class ObjectStoreSettings(TomlWritable):
    """S3-compatible object storage for WARC objects (used when warc.sink = "s3")."""

    # "" = AWS S3 itself (boto3's default endpoint for the region); MinIO, Ceph RGW, SeaweedFS:
    # their S3 URL, e.g. "http://127.0.0.1:8333".
    endpoint: str = ""
    bucket: str = "wancrawl"
    region: str = "us-east-1"
    # "" = boto3's default chain (AWS_ACCESS_KEY_ID/..., ~/.aws, an instance role).
    access_key_id: str = ""
    secret_access_key: str = ""
    # Every writer's objects live under <key_prefix><writer_id>/; no two writers share an id
    # (recovery completes or aborts the uploads under its own id only).
    key_prefix: str = ""
    writer_id: str = ""
    # A group commit's bytes are uploaded as one part before its records are indexed. A part
    # under S3's 5 MiB floor can only be an object's last: the object is completed after that
    # commit. The committer gathers batches up to part_bytes or `linger` seconds.
    part_bytes: int = 8 * 1024 * 1024
    linger: float = 0.5
    # An open object (its records indexed, not yet readable from the bucket) is completed at the
    # first commit past this age, so replay never lags ingest by more.
    max_open_seconds: float = 60.0
    create_bucket: bool = False  # create the bucket at start if missing (tests, the lab)
    timeout: float = 30.0  # connect/read deadline of one S3 request

    def __post_init__(self) -> None:
        if self.part_bytes < MIN_PART_BYTES:
            raise ValueError(f"object_store.part_bytes must be at least {MIN_PART_BYTES} (S3's part floor)")
        if not self.linger >= 0:
            raise ValueError("object_store.linger must be >= 0")
        if not self.max_open_seconds > 0:
            raise ValueError("object_store.max_open_seconds must be > 0")
        if not self.timeout > 0:
            raise ValueError("object_store.timeout must be > 0")
        if self.writer_id and not all(ch.isalnum() or ch in "-_." for ch in self.writer_id):
            raise ValueError(f"object_store.writer_id may hold letters, digits, '-', '_' and '.', got {self.writer_id!r}")


@dataclass(frozen=True)
class IngestSettings(TomlWritable):
    # "always": fsync WARC files (and SQLite synchronous=FULL) before acknowledging;
    # "os": acknowledge once the data is in the OS page cache (survives a process crash,
    # not a power cut).
    fsync: str = "always"
    dedup: bool = True
    # Smaller payloads (redirects, empty bodies) are not worth a revisit record.
    dedup_min_bytes: int = 256
    # Batches waiting for the writer thread; a full queue slows clients down instead of using memory.
    queue_batches: int = 32
    # "header": check each gzip member starts a WARC record (cheap); "full": inflate it all.
    validate: str = "header"

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"ingest.fsync must be one of {FSYNC_POLICIES}, got {self.fsync!r}")
        if self.validate not in ("header", "full"):
            raise ValueError(f"ingest.validate must be 'header' or 'full', got {self.validate!r}")
        if self.queue_batches < 1:
            raise ValueError("ingest.queue_batches must be at least 1")


@dataclass(frozen=True)
class PlacementSettings(TomlWritable):
    """How storage checks that an ingesting agent is placed on each capture's host (used only
    when `consultant` is set; docs/storage.md, docs/security.md)."""

    # Resolve's deadline: an Ingest waits this long at most for the consultant before storage
    # answers UNAVAILABLE (the agent keeps the batch in its spool and sends it again later).
    timeout: float = 5.0
    # Hosts whose route (preference list, epoch, TTL) storage keeps.
    cache_size: int = 100_000
    # With `peers`: a host's preference list is its key's closest nodes, this many (1 + the
    # agents' replication.backups; the consultant names its own list and needs none).
    preference: int = 3

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError("placement.timeout must be > 0")
        if self.cache_size < 1:
            raise ValueError("placement.cache_size must be at least 1")
        if not 1 <= self.preference <= 20:
            raise ValueError("placement.preference must be 1..20")


@dataclass(frozen=True)
class StorageSettings(TomlWritable):
    listen: str = "127.0.0.1:7400"
    data_dir: str = "data/storage"
    metrics_listen: str = ""  # host:port for Prometheus metrics ("" = off)
    event_loop: str = "asyncio"  # or "uvloop" (wancrawl/runtime/eventloop.py; not measured for storage yet)
    # host:port of the consultant. Set: a capture is stored only from an agent the consultant
    # places on its host (owner or backup); "" = no such check (any agent may ingest any host).
    consultant: str = ""
    # Without a consultant (the agents' Kademlia mode): agents to ask the same question (their
    # overlay answers it, docs/kademlia.md); the first that answers is asked.
    peers: tuple[str, ...] = ()
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    warc: WarcSettings = field(default_factory=WarcSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)  # mutual TLS (docs/security.md)

    def __post_init__(self) -> None:
        check_event_loop(self.event_loop)
        if self.warc.sink == "s3" and not self.object_store.writer_id:
            raise ValueError("object_store.writer_id must be set when warc.sink = 's3' (each writer owns its objects)")

    def warc_dir(self) -> Path:
        return Path(self.warc.dir) if self.warc.dir else Path(self.data_dir) / "warcs"

    def index_url(self) -> str:
        return self.index.url or f"sqlite:///{Path(self.data_dir) / 'index.sqlite'}"


def load(path: str | Path | None = None, overrides: dict | None = None) -> StorageSettings:
    """Storage settings from a TOML file (or the defaults), then dotted `overrides`; relative
    paths and sqlite URLs are taken from the file's directory."""
    return config.load(StorageSettings, path, overrides, paths=("data_dir", "warc.dir", "tls.ca", "tls.cert", "tls.key"), sqlite_urls=("index.url",))
