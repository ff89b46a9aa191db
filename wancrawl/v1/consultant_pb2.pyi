from wancrawl.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_STATE_UNSPECIFIED: _ClassVar[AgentState]
    AGENT_STATE_ALIVE: _ClassVar[AgentState]
    AGENT_STATE_DEAD: _ClassVar[AgentState]
    AGENT_STATE_LEFT: _ClassVar[AgentState]
AGENT_STATE_UNSPECIFIED: AgentState
AGENT_STATE_ALIVE: AgentState
AGENT_STATE_DEAD: AgentState
AGENT_STATE_LEFT: AgentState

class RegisterRequest(_message.Message):
    __slots__ = ("agent_id", "address", "location", "source_ip", "capacity")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IP_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    location: _common_pb2.Location
    source_ip: str
    capacity: float
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., location: _Optional[_Union[_common_pb2.Location, _Mapping]] = ..., source_ip: _Optional[str] = ..., capacity: _Optional[float] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("epoch", "lease_seconds", "location", "strategy")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_seconds: float
    location: _common_pb2.Location
    strategy: str
    def __init__(self, epoch: _Optional[int] = ..., lease_seconds: _Optional[float] = ..., location: _Optional[_Union[_common_pb2.Location, _Mapping]] = ..., strategy: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("agent_id", "load")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    load: _common_pb2.LoadReport
    def __init__(self, agent_id: _Optional[str] = ..., load: _Optional[_Union[_common_pb2.LoadReport, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("epoch", "lease_seconds")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_seconds: float
    def __init__(self, epoch: _Optional[int] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class DeregisterRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class HostAnswer(_message.Message):
    __slots__ = ("host", "agents", "ttl_seconds", "error")
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    host: str
    agents: _containers.RepeatedScalarFieldContainer[int]
    ttl_seconds: int
    error: str
    def __init__(self, host: _Optional[str] = ..., agents: _Optional[_Iterable[int]] = ..., ttl_seconds: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ("epoch", "agents", "answers")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    agents: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentRef]
    answers: _containers.RepeatedCompositeFieldContainer[HostAnswer]
    def __init__(self, epoch: _Optional[int] = ..., agents: _Optional[_Iterable[_Union[_common_pb2.AgentRef, _Mapping]]] = ..., answers: _Optional[_Iterable[_Union[HostAnswer, _Mapping]]] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("agent_id", "address", "rank", "score", "detail", "location")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    rank: int
    score: float
    detail: str
    location: _common_pb2.Location
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., rank: _Optional[int] = ..., score: _Optional[float] = ..., detail: _Optional[str] = ..., location: _Optional[_Union[_common_pb2.Location, _Mapping]] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("host", "ip", "site", "strategy", "epoch", "candidates", "override_agent", "notes", "ttl_seconds")
    HOST_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    SITE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_AGENT_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    host: str
    ip: str
    site: _common_pb2.Location
    strategy: str
    epoch: int
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    override_agent: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    ttl_seconds: int
    def __init__(self, host: _Optional[str] = ..., ip: _Optional[str] = ..., site: _Optional[_Union[_common_pb2.Location, _Mapping]] = ..., strategy: _Optional[str] = ..., epoch: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., override_agent: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("include_dead",)
    INCLUDE_DEAD_FIELD_NUMBER: _ClassVar[int]
    include_dead: bool
    def __init__(self, include_dead: _Optional[bool] = ...) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("agent_id", "address", "location", "state", "registered_at", "last_heartbeat", "lease_expires", "load", "capacity", "weight", "measured_rate", "predicted_rate", "samples")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MEASURED_RATE_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_RATE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    location: _common_pb2.Location
    state: AgentState
    registered_at: float
    last_heartbeat: float
    lease_expires: float
    load: _common_pb2.LoadReport
    capacity: float
    weight: float
    measured_rate: float
    predicted_rate: float
    samples: int
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., location: _Optional[_Union[_common_pb2.Location, _Mapping]] = ..., state: _Optional[_Union[AgentState, str]] = ..., registered_at: _Optional[float] = ..., last_heartbeat: _Optional[float] = ..., lease_expires: _Optional[float] = ..., load: _Optional[_Union[_common_pb2.LoadReport, _Mapping]] = ..., capacity: _Optional[float] = ..., weight: _Optional[float] = ..., measured_rate: _Optional[float] = ..., predicted_rate: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("epoch", "strategy", "agents", "capacity_model", "capacity_errors")
    class CapacityErrorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_MODEL_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    strategy: str
    agents: _containers.RepeatedCompositeFieldContainer[AgentInfo]
    capacity_model: str
    capacity_errors: _containers.ScalarMap[str, float]
    def __init__(self, epoch: _Optional[int] = ..., strategy: _Optional[str] = ..., agents: _Optional[_Iterable[_Union[AgentInfo, _Mapping]]] = ..., capacity_model: _Optional[str] = ..., capacity_errors: _Optional[_Mapping[str, float]] = ...) -> None: ...

class LiveAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LiveAgentsResponse(_message.Message):
    __slots__ = ("epoch", "agents")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    agents: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentRef]
    def __init__(self, epoch: _Optional[int] = ..., agents: _Optional[_Iterable[_Union[_common_pb2.AgentRef, _Mapping]]] = ...) -> None: ...

class SetOverrideRequest(_message.Message):
    __slots__ = ("host", "agent_id")
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    host: str
    agent_id: str
    def __init__(self, host: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class ClearOverrideRequest(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class SetOverrideResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...
