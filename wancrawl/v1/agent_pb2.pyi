from wancrawl.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UrlItem(_message.Message):
    __slots__ = ("url", "depth", "via")
    URL_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    url: str
    depth: int
    via: str
    def __init__(self, url: _Optional[str] = ..., depth: _Optional[int] = ..., via: _Optional[str] = ...) -> None: ...

class PushUrlsRequest(_message.Message):
    __slots__ = ("sender_id", "epoch", "urls")
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    URLS_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    epoch: int
    urls: _containers.RepeatedCompositeFieldContainer[UrlItem]
    def __init__(self, sender_id: _Optional[str] = ..., epoch: _Optional[int] = ..., urls: _Optional[_Iterable[_Union[UrlItem, _Mapping]]] = ...) -> None: ...

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
    __slots__ = ("agent_id", "load", "counters")
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
    agent_id: str
    load: _common_pb2.LoadReport
    counters: _containers.ScalarMap[str, float]
    def __init__(self, agent_id: _Optional[str] = ..., load: _Optional[_Union[_common_pb2.LoadReport, _Mapping]] = ..., counters: _Optional[_Mapping[str, float]] = ...) -> None: ...

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
