from wancrawl.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Contact(_message.Message):
    __slots__ = ("node_id", "agent_id", "address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: bytes
    agent_id: str
    address: str
    def __init__(self, node_id: _Optional[bytes] = ..., agent_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ("sender", "epoch", "load", "delegations")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONS_FIELD_NUMBER: _ClassVar[int]
    sender: Contact
    epoch: int
    load: NodeLoad
    delegations: _containers.RepeatedCompositeFieldContainer[Delegation]
    def __init__(self, sender: _Optional[_Union[Contact, _Mapping]] = ..., epoch: _Optional[int] = ..., load: _Optional[_Union[NodeLoad, _Mapping]] = ..., delegations: _Optional[_Iterable[_Union[Delegation, _Mapping]]] = ...) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("responder", "epoch", "load", "delegations")
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONS_FIELD_NUMBER: _ClassVar[int]
    responder: Contact
    epoch: int
    load: NodeLoad
    delegations: _containers.RepeatedCompositeFieldContainer[Delegation]
    def __init__(self, responder: _Optional[_Union[Contact, _Mapping]] = ..., epoch: _Optional[int] = ..., load: _Optional[_Union[NodeLoad, _Mapping]] = ..., delegations: _Optional[_Iterable[_Union[Delegation, _Mapping]]] = ...) -> None: ...

class NodeLoad(_message.Message):
    __slots__ = ("load_level", "work_area", "queue_length", "rate")
    LOAD_LEVEL_FIELD_NUMBER: _ClassVar[int]
    WORK_AREA_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    load_level: float
    work_area: float
    queue_length: int
    rate: float
    def __init__(self, load_level: _Optional[float] = ..., work_area: _Optional[float] = ..., queue_length: _Optional[int] = ..., rate: _Optional[float] = ...) -> None: ...

class Delegation(_message.Message):
    __slots__ = ("key", "delegate")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DELEGATE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    delegate: Contact
    def __init__(self, key: _Optional[bytes] = ..., delegate: _Optional[_Union[Contact, _Mapping]] = ...) -> None: ...

class FindNodeRequest(_message.Message):
    __slots__ = ("sender", "targets", "count", "epoch")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    sender: Contact
    targets: _containers.RepeatedScalarFieldContainer[bytes]
    count: int
    epoch: int
    def __init__(self, sender: _Optional[_Union[Contact, _Mapping]] = ..., targets: _Optional[_Iterable[bytes]] = ..., count: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class Closest(_message.Message):
    __slots__ = ("contacts",)
    CONTACTS_FIELD_NUMBER: _ClassVar[int]
    contacts: _containers.RepeatedCompositeFieldContainer[Contact]
    def __init__(self, contacts: _Optional[_Iterable[_Union[Contact, _Mapping]]] = ...) -> None: ...

class FindNodeResponse(_message.Message):
    __slots__ = ("responder", "closest", "epoch")
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    CLOSEST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    responder: Contact
    closest: _containers.RepeatedCompositeFieldContainer[Closest]
    epoch: int
    def __init__(self, responder: _Optional[_Union[Contact, _Mapping]] = ..., closest: _Optional[_Iterable[_Union[Closest, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("sender",)
    SENDER_FIELD_NUMBER: _ClassVar[int]
    sender: Contact
    def __init__(self, sender: _Optional[_Union[Contact, _Mapping]] = ...) -> None: ...

class LeaveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("members", "epoch")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Contact]
    epoch: int
    def __init__(self, members: _Optional[_Iterable[_Union[Contact, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...

class UrlItem(_message.Message):
    __slots__ = ("url", "depth", "via", "force")
    URL_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    url: str
    depth: int
    via: str
    force: bool
    def __init__(self, url: _Optional[str] = ..., depth: _Optional[int] = ..., via: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class PushUrlsRequest(_message.Message):
    __slots__ = ("sender_id", "epoch", "urls", "route")
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    URLS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    epoch: int
    urls: _containers.RepeatedCompositeFieldContainer[UrlItem]
    route: bool
    def __init__(self, sender_id: _Optional[str] = ..., epoch: _Optional[int] = ..., urls: _Optional[_Iterable[_Union[UrlItem, _Mapping]]] = ..., route: _Optional[bool] = ...) -> None: ...

class PushUrlsResponse(_message.Message):
    __slots__ = ("accepted", "not_mine", "epoch", "errors")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    NOT_MINE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    not_mine: _containers.RepeatedScalarFieldContainer[int]
    epoch: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, accepted: _Optional[int] = ..., not_mine: _Optional[_Iterable[int]] = ..., epoch: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("agent_id", "load", "counters", "parked", "given_up", "top_hosts")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    GIVEN_UP_FIELD_NUMBER: _ClassVar[int]
    TOP_HOSTS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    load: _common_pb2.LoadReport
    counters: _containers.ScalarMap[str, float]
    parked: _containers.RepeatedCompositeFieldContainer[HostNote]
    given_up: _containers.RepeatedCompositeFieldContainer[HostNote]
    top_hosts: _containers.RepeatedCompositeFieldContainer[HostCost]
    def __init__(self, agent_id: _Optional[str] = ..., load: _Optional[_Union[_common_pb2.LoadReport, _Mapping]] = ..., counters: _Optional[_Mapping[str, float]] = ..., parked: _Optional[_Iterable[_Union[HostNote, _Mapping]]] = ..., given_up: _Optional[_Iterable[_Union[HostNote, _Mapping]]] = ..., top_hosts: _Optional[_Iterable[_Union[HostCost, _Mapping]]] = ...) -> None: ...

class HostCost(_message.Message):
    __slots__ = ("host", "pages", "bytes", "give_ups")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    GIVE_UPS_FIELD_NUMBER: _ClassVar[int]
    host: str
    pages: int
    bytes: int
    give_ups: int
    def __init__(self, host: _Optional[str] = ..., pages: _Optional[int] = ..., bytes: _Optional[int] = ..., give_ups: _Optional[int] = ...) -> None: ...

class HostNote(_message.Message):
    __slots__ = ("host", "reason", "until")
    HOST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    host: str
    reason: str
    until: float
    def __init__(self, host: _Optional[str] = ..., reason: _Optional[str] = ..., until: _Optional[float] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("timeout_seconds",)
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    timeout_seconds: float
    def __init__(self, timeout_seconds: _Optional[float] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("handed_over", "remaining")
    HANDED_OVER_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    handed_over: int
    remaining: int
    def __init__(self, handed_over: _Optional[int] = ..., remaining: _Optional[int] = ...) -> None: ...

class QueuedUrl(_message.Message):
    __slots__ = ("url", "depth", "via", "not_before", "seq")
    URL_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    url: str
    depth: int
    via: str
    not_before: float
    seq: int
    def __init__(self, url: _Optional[str] = ..., depth: _Optional[int] = ..., via: _Optional[str] = ..., not_before: _Optional[float] = ..., seq: _Optional[int] = ...) -> None: ...

class RobotsState(_message.Message):
    __slots__ = ("origin", "status", "body", "expires", "fetched_ok", "failing_since")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    FETCHED_OK_FIELD_NUMBER: _ClassVar[int]
    FAILING_SINCE_FIELD_NUMBER: _ClassVar[int]
    origin: str
    status: int
    body: bytes
    expires: float
    fetched_ok: float
    failing_since: float
    def __init__(self, origin: _Optional[str] = ..., status: _Optional[int] = ..., body: _Optional[bytes] = ..., expires: _Optional[float] = ..., fetched_ok: _Optional[float] = ..., failing_since: _Optional[float] = ...) -> None: ...

class HostState(_message.Message):
    __slots__ = ("host", "queue", "seen", "crawl_delay", "backoff_until", "backoff_level", "robots", "pages", "revisits")
    HOST_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SEEN_FIELD_NUMBER: _ClassVar[int]
    CRAWL_DELAY_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_UNTIL_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ROBOTS_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    REVISITS_FIELD_NUMBER: _ClassVar[int]
    host: str
    queue: _containers.RepeatedCompositeFieldContainer[QueuedUrl]
    seen: _containers.RepeatedScalarFieldContainer[int]
    crawl_delay: float
    backoff_until: float
    backoff_level: int
    robots: _containers.RepeatedCompositeFieldContainer[RobotsState]
    pages: int
    revisits: _containers.RepeatedCompositeFieldContainer[RevisitEntry]
    def __init__(self, host: _Optional[str] = ..., queue: _Optional[_Iterable[_Union[QueuedUrl, _Mapping]]] = ..., seen: _Optional[_Iterable[int]] = ..., crawl_delay: _Optional[float] = ..., backoff_until: _Optional[float] = ..., backoff_level: _Optional[int] = ..., robots: _Optional[_Iterable[_Union[RobotsState, _Mapping]]] = ..., pages: _Optional[int] = ..., revisits: _Optional[_Iterable[_Union[RevisitEntry, _Mapping]]] = ...) -> None: ...

class RevisitEntry(_message.Message):
    __slots__ = ("url", "due", "interval", "last", "digest", "etag", "modified", "length", "visits", "changes", "span", "depth", "lastmod", "changefreq")
    URL_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    SPAN_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LASTMOD_FIELD_NUMBER: _ClassVar[int]
    CHANGEFREQ_FIELD_NUMBER: _ClassVar[int]
    url: str
    due: float
    interval: float
    last: float
    digest: str
    etag: str
    modified: str
    length: int
    visits: int
    changes: int
    span: float
    depth: int
    lastmod: float
    changefreq: float
    def __init__(self, url: _Optional[str] = ..., due: _Optional[float] = ..., interval: _Optional[float] = ..., last: _Optional[float] = ..., digest: _Optional[str] = ..., etag: _Optional[str] = ..., modified: _Optional[str] = ..., length: _Optional[int] = ..., visits: _Optional[int] = ..., changes: _Optional[int] = ..., span: _Optional[float] = ..., depth: _Optional[int] = ..., lastmod: _Optional[float] = ..., changefreq: _Optional[float] = ...) -> None: ...

class HandOverRequest(_message.Message):
    __slots__ = ("sender_id", "epoch", "host", "replica_of")
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    REPLICA_OF_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    epoch: int
    host: HostState
    replica_of: str
    def __init__(self, sender_id: _Optional[str] = ..., epoch: _Optional[int] = ..., host: _Optional[_Union[HostState, _Mapping]] = ..., replica_of: _Optional[str] = ...) -> None: ...

class HandOverResponse(_message.Message):
    __slots__ = ("hosts", "queued", "seen", "refused")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    SEEN_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    hosts: int
    queued: int
    seen: int
    refused: _containers.RepeatedCompositeFieldContainer[HostNote]
    def __init__(self, hosts: _Optional[int] = ..., queued: _Optional[int] = ..., seen: _Optional[int] = ..., refused: _Optional[_Iterable[_Union[HostNote, _Mapping]]] = ...) -> None: ...

class ReplicateRequest(_message.Message):
    __slots__ = ("sender_id", "epoch", "host", "reset", "drop", "state", "done", "unshipped")
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    DROP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    UNSHIPPED_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    epoch: int
    host: str
    reset: bool
    drop: bool
    state: HostState
    done: _containers.RepeatedScalarFieldContainer[int]
    unshipped: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sender_id: _Optional[str] = ..., epoch: _Optional[int] = ..., host: _Optional[str] = ..., reset: _Optional[bool] = ..., drop: _Optional[bool] = ..., state: _Optional[_Union[HostState, _Mapping]] = ..., done: _Optional[_Iterable[int]] = ..., unshipped: _Optional[_Iterable[int]] = ...) -> None: ...

class ReplicateBatch(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ReplicateRequest]
    def __init__(self, items: _Optional[_Iterable[_Union[ReplicateRequest, _Mapping]]] = ...) -> None: ...

class ReplicateResponse(_message.Message):
    __slots__ = ("applied", "refused")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    applied: int
    refused: _containers.RepeatedCompositeFieldContainer[HostNote]
    def __init__(self, applied: _Optional[int] = ..., refused: _Optional[_Iterable[_Union[HostNote, _Mapping]]] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("claimer_id", "claimer_address", "epoch", "hosts")
    CLAIMER_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    claimer_id: str
    claimer_address: str
    epoch: int
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, claimer_id: _Optional[str] = ..., claimer_address: _Optional[str] = ..., epoch: _Optional[int] = ..., hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("handed", "not_held", "refused", "epoch")
    HANDED_FIELD_NUMBER: _ClassVar[int]
    NOT_HELD_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    handed: _containers.RepeatedScalarFieldContainer[str]
    not_held: _containers.RepeatedScalarFieldContainer[str]
    refused: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    def __init__(self, handed: _Optional[_Iterable[str]] = ..., not_held: _Optional[_Iterable[str]] = ..., refused: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ...) -> None: ...
