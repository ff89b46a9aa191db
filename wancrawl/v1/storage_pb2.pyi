from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RejectionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REJECTION_KIND_INVALID: _ClassVar[RejectionKind]
    REJECTION_KIND_NOT_PLACED: _ClassVar[RejectionKind]
REJECTION_KIND_INVALID: RejectionKind
REJECTION_KIND_NOT_PLACED: RejectionKind

class Capture(_message.Message):
    __slots__ = ("record_id", "url", "agent_id", "fetched_at", "warc_date", "status", "content_type", "payload_digest", "payload_length", "ip", "truncated", "response", "request", "metadata", "http_headers", "raw_length", "refetch")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    WARC_DATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_LENGTH_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    HTTP_HEADERS_FIELD_NUMBER: _ClassVar[int]
    RAW_LENGTH_FIELD_NUMBER: _ClassVar[int]
    REFETCH_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    url: str
    agent_id: str
    fetched_at: float
    warc_date: str
    status: int
    content_type: str
    payload_digest: str
    payload_length: int
    ip: str
    truncated: str
    response: bytes
    request: bytes
    metadata: bytes
    http_headers: bytes
    raw_length: int
    refetch: bool
    def __init__(self, record_id: _Optional[str] = ..., url: _Optional[str] = ..., agent_id: _Optional[str] = ..., fetched_at: _Optional[float] = ..., warc_date: _Optional[str] = ..., status: _Optional[int] = ..., content_type: _Optional[str] = ..., payload_digest: _Optional[str] = ..., payload_length: _Optional[int] = ..., ip: _Optional[str] = ..., truncated: _Optional[str] = ..., response: _Optional[bytes] = ..., request: _Optional[bytes] = ..., metadata: _Optional[bytes] = ..., http_headers: _Optional[bytes] = ..., raw_length: _Optional[int] = ..., refetch: _Optional[bool] = ...) -> None: ...

class PageBatch(_message.Message):
    __slots__ = ("batch_id", "captures")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CAPTURES_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    captures: _containers.RepeatedCompositeFieldContainer[Capture]
    def __init__(self, batch_id: _Optional[str] = ..., captures: _Optional[_Iterable[_Union[Capture, _Mapping]]] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("batch_id", "index", "record_id", "reason", "kind")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    index: int
    record_id: str
    reason: str
    kind: RejectionKind
    def __init__(self, batch_id: _Optional[str] = ..., index: _Optional[int] = ..., record_id: _Optional[str] = ..., reason: _Optional[str] = ..., kind: _Optional[_Union[RejectionKind, str]] = ...) -> None: ...

class IngestAck(_message.Message):
    __slots__ = ("batches", "stored", "revisits", "duplicates", "rejected", "bytes_written")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REVISITS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    batches: int
    stored: int
    revisits: int
    duplicates: int
    rejected: _containers.RepeatedCompositeFieldContainer[Rejection]
    bytes_written: int
    def __init__(self, batches: _Optional[int] = ..., stored: _Optional[int] = ..., revisits: _Optional[int] = ..., duplicates: _Optional[int] = ..., rejected: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., bytes_written: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("url", "has_at", "at", "record_id")
    URL_FIELD_NUMBER: _ClassVar[int]
    HAS_AT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    url: str
    has_at: bool
    at: float
    record_id: str
    def __init__(self, url: _Optional[str] = ..., has_at: _Optional[bool] = ..., at: _Optional[float] = ..., record_id: _Optional[str] = ...) -> None: ...

class CaptureInfo(_message.Message):
    __slots__ = ("record_id", "url", "canonical_url", "host", "agent_id", "fetched_at", "status", "content_type", "payload_digest", "record_type", "refers_to", "warc_file", "offset", "length", "truncated", "ip")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_URL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RECORD_TYPE_FIELD_NUMBER: _ClassVar[int]
    REFERS_TO_FIELD_NUMBER: _ClassVar[int]
    WARC_FILE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    url: str
    canonical_url: str
    host: str
    agent_id: str
    fetched_at: float
    status: int
    content_type: str
    payload_digest: str
    record_type: str
    refers_to: str
    warc_file: str
    offset: int
    length: int
    truncated: str
    ip: str
    def __init__(self, record_id: _Optional[str] = ..., url: _Optional[str] = ..., canonical_url: _Optional[str] = ..., host: _Optional[str] = ..., agent_id: _Optional[str] = ..., fetched_at: _Optional[float] = ..., status: _Optional[int] = ..., content_type: _Optional[str] = ..., payload_digest: _Optional[str] = ..., record_type: _Optional[str] = ..., refers_to: _Optional[str] = ..., warc_file: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., truncated: _Optional[str] = ..., ip: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("capture", "http_headers", "body")
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    HTTP_HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    capture: CaptureInfo
    http_headers: bytes
    body: bytes
    def __init__(self, capture: _Optional[_Union[CaptureInfo, _Mapping]] = ..., http_headers: _Optional[bytes] = ..., body: _Optional[bytes] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("url", "limit")
    URL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    url: str
    limit: int
    def __init__(self, url: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("captures",)
    CAPTURES_FIELD_NUMBER: _ClassVar[int]
    captures: _containers.RepeatedCompositeFieldContainer[CaptureInfo]
    def __init__(self, captures: _Optional[_Iterable[_Union[CaptureInfo, _Mapping]]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("urls",)
    URLS_FIELD_NUMBER: _ClassVar[int]
    urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, urls: _Optional[_Iterable[str]] = ...) -> None: ...

class Found(_message.Message):
    __slots__ = ("url", "statuses")
    URL_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    url: str
    statuses: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, url: _Optional[str] = ..., statuses: _Optional[_Iterable[int]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: _containers.RepeatedCompositeFieldContainer[Found]
    def __init__(self, found: _Optional[_Iterable[_Union[Found, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("top", "writer_only")
    TOP_FIELD_NUMBER: _ClassVar[int]
    WRITER_ONLY_FIELD_NUMBER: _ClassVar[int]
    top: int
    writer_only: bool
    def __init__(self, top: _Optional[int] = ..., writer_only: _Optional[bool] = ...) -> None: ...

class Count(_message.Message):
    __slots__ = ("key", "pages", "stored_bytes")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    key: str
    pages: int
    stored_bytes: int
    def __init__(self, key: _Optional[str] = ..., pages: _Optional[int] = ..., stored_bytes: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("pages", "responses", "revisits", "raw_bytes", "stored_bytes", "compression_ratio", "warc_files", "hosts", "agents", "per_host", "per_agent", "writer")
    PAGES_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    REVISITS_FIELD_NUMBER: _ClassVar[int]
    RAW_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_RATIO_FIELD_NUMBER: _ClassVar[int]
    WARC_FILES_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    PER_HOST_FIELD_NUMBER: _ClassVar[int]
    PER_AGENT_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    pages: int
    responses: int
    revisits: int
    raw_bytes: int
    stored_bytes: int
    compression_ratio: float
    warc_files: int
    hosts: int
    agents: int
    per_host: _containers.RepeatedCompositeFieldContainer[Count]
    per_agent: _containers.RepeatedCompositeFieldContainer[Count]
    writer: WriterStatus
    def __init__(self, pages: _Optional[int] = ..., responses: _Optional[int] = ..., revisits: _Optional[int] = ..., raw_bytes: _Optional[int] = ..., stored_bytes: _Optional[int] = ..., compression_ratio: _Optional[float] = ..., warc_files: _Optional[int] = ..., hosts: _Optional[int] = ..., agents: _Optional[int] = ..., per_host: _Optional[_Iterable[_Union[Count, _Mapping]]] = ..., per_agent: _Optional[_Iterable[_Union[Count, _Mapping]]] = ..., writer: _Optional[_Union[WriterStatus, _Mapping]] = ...) -> None: ...

class WriterStatus(_message.Message):
    __slots__ = ("writer_id", "sink", "uptime_seconds", "pages", "duplicates", "bytes_written", "queued_batches", "lag_seconds", "since_durable_seconds")
    WRITER_ID_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SINCE_DURABLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    writer_id: str
    sink: str
    uptime_seconds: float
    pages: int
    duplicates: int
    bytes_written: int
    queued_batches: int
    lag_seconds: float
    since_durable_seconds: float
    def __init__(self, writer_id: _Optional[str] = ..., sink: _Optional[str] = ..., uptime_seconds: _Optional[float] = ..., pages: _Optional[int] = ..., duplicates: _Optional[int] = ..., bytes_written: _Optional[int] = ..., queued_batches: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., since_durable_seconds: _Optional[float] = ...) -> None: ...
