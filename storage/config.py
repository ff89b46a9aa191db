"""Storage settings: a TOML file read into typed dataclasses (wancrawl.config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wancrawl.config import build, read_toml
from wancrawl.errors import ConfigError

FSYNC_POLICIES = ("always", "os")


@dataclass(frozen=True)
class IndexSettings:
    # SQLAlchemy URL; "" means SQLite at <data_dir>/index.sqlite.
    url: str = ""
    # PostgreSQL schema holding the tables (created if missing); None = the default schema.
    schema: str | None = None


@dataclass(frozen=True)
class WarcSettings:
    dir: str = ""  # "" means <data_dir>/warcs
    prefix: str = "wancrawl"
    max_file_bytes: int = 1_000_000_000

    def __post_init__(self) -> None:
        if self.max_file_bytes < 4096:
            raise ValueError("warc.max_file_bytes must be at least 4096")


@dataclass(frozen=True)
class IngestSettings:
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
class StorageSettings:
    listen: str = "127.0.0.1:7400"
    data_dir: str = "data/storage"
    metrics_listen: str = ""  # host:port for Prometheus metrics ("" = off)
    index: IndexSettings = field(default_factory=IndexSettings)
    warc: WarcSettings = field(default_factory=WarcSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)

    def warc_dir(self) -> Path:
        return Path(self.warc.dir) if self.warc.dir else Path(self.data_dir) / "warcs"

    def index_url(self) -> str:
        return self.index.url or f"sqlite:///{Path(self.data_dir) / 'index.sqlite'}"


def _resolve(path: str, base: Path) -> str:
    return path if not path or Path(path).is_absolute() else str(base / path)


def load(path: str | Path) -> StorageSettings:
    """Read a storage TOML file; relative paths are taken from the file's directory."""
    data = read_toml(path)
    settings = build(StorageSettings, data, source=str(path))
    return resolve_paths(settings, Path(path).resolve().parent)


def resolve_paths(settings: StorageSettings, base: Path) -> StorageSettings:
    from dataclasses import replace

    if settings.index.url.startswith("sqlite:///") and not settings.index.url.startswith("sqlite:////"):
        rel = settings.index.url[len("sqlite:///"):]
        if rel and rel != ":memory:":
            settings = replace(settings, index=replace(settings.index, url=f"sqlite:///{_resolve(rel, base)}"))
    return replace(
        settings,
        data_dir=_resolve(settings.data_dir, base),
        warc=replace(settings.warc, dir=_resolve(settings.warc.dir, base)),
    )


def from_dict(data: dict, source: str = "config") -> StorageSettings:
    try:
        return build(StorageSettings, data, source=source)
    except ConfigError:
        raise
