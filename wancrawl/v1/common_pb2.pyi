from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Location(_message.Message):
    __slots__ = ("city", "country", "lat", "lon", "has_coordinates", "asn", "isp")
    CITY_FIELD_NUMBER: _ClassVar[int]
    COUNTRY_FIELD_NUMBER: _ClassVar[int]
    LAT_FIELD_NUMBER: _ClassVar[int]
    LON_FIELD_NUMBER: _ClassVar[int]
    HAS_COORDINATES_FIELD_NUMBER: _ClassVar[int]
    ASN_FIELD_NUMBER: _ClassVar[int]
    ISP_FIELD_NUMBER: _ClassVar[int]
    city: str
    country: str
    lat: float
    lon: float
    has_coordinates: bool
    asn: int
    isp: str
    def __init__(self, city: _Optional[str] = ..., country: _Optional[str] = ..., lat: _Optional[float] = ..., lon: _Optional[float] = ..., has_coordinates: _Optional[bool] = ..., asn: _Optional[int] = ..., isp: _Optional[str] = ...) -> None: ...

class LoadReport(_message.Message):
    __slots__ = ("queue_length", "in_flight", "pages_per_second", "errors", "hosts_owned", "capacity", "load_level", "pages_fetched", "spool_pages", "work_area", "peak_pages_per_second", "heavy_hosts", "resources", "interval_pages", "interval_seconds")
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PAGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    HOSTS_OWNED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    LOAD_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PAGES_FETCHED_FIELD_NUMBER: _ClassVar[int]
    SPOOL_PAGES_FIELD_NUMBER: _ClassVar[int]
    WORK_AREA_FIELD_NUMBER: _ClassVar[int]
    PEAK_PAGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    HEAVY_HOSTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_PAGES_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    queue_length: int
    in_flight: int
    pages_per_second: float
    errors: int
    hosts_owned: int
    capacity: float
    load_level: float
    pages_fetched: int
    spool_pages: int
    work_area: float
    peak_pages_per_second: float
    heavy_hosts: _containers.RepeatedCompositeFieldContainer[HostLoad]
    resources: Resources
    interval_pages: int
    interval_seconds: float
    def __init__(self, queue_length: _Optional[int] = ..., in_flight: _Optional[int] = ..., pages_per_second: _Optional[float] = ..., errors: _Optional[int] = ..., hosts_owned: _Optional[int] = ..., capacity: _Optional[float] = ..., load_level: _Optional[float] = ..., pages_fetched: _Optional[int] = ..., spool_pages: _Optional[int] = ..., work_area: _Optional[float] = ..., peak_pages_per_second: _Optional[float] = ..., heavy_hosts: _Optional[_Iterable[_Union[HostLoad, _Mapping]]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., interval_pages: _Optional[int] = ..., interval_seconds: _Optional[float] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("cores", "cpu_ghz", "memory_gb", "bandwidth_mbps", "disk_mbps")
    CORES_FIELD_NUMBER: _ClassVar[int]
    CPU_GHZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GB_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_MBPS_FIELD_NUMBER: _ClassVar[int]
    DISK_MBPS_FIELD_NUMBER: _ClassVar[int]
    cores: float
    cpu_ghz: float
    memory_gb: float
    bandwidth_mbps: float
    disk_mbps: float
    def __init__(self, cores: _Optional[float] = ..., cpu_ghz: _Optional[float] = ..., memory_gb: _Optional[float] = ..., bandwidth_mbps: _Optional[float] = ..., disk_mbps: _Optional[float] = ...) -> None: ...

class HostLoad(_message.Message):
    __slots__ = ("host", "queue_length")
    HOST_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    host: str
    queue_length: int
    def __init__(self, host: _Optional[str] = ..., queue_length: _Optional[int] = ...) -> None: ...

class AgentRef(_message.Message):
    __slots__ = ("agent_id", "address")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...
