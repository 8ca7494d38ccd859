from powertrip.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetProfilesRequest(_message.Message):
    __slots__ = ("at_s", "site_ids", "columnar")
    AT_S_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_FIELD_NUMBER: _ClassVar[int]
    at_s: float
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    columnar: bool
    def __init__(self, at_s: _Optional[float] = ..., site_ids: _Optional[_Iterable[str]] = ..., columnar: bool = ...) -> None: ...

class GetProfilesResponse(_message.Message):
    __slots__ = ("sites", "power_mode", "seed", "columns")
    SITES_FIELD_NUMBER: _ClassVar[int]
    POWER_MODE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    sites: _containers.RepeatedCompositeFieldContainer[_common_pb2.SiteProfile]
    power_mode: str
    seed: int
    columns: _common_pb2.SiteColumns
    def __init__(self, sites: _Optional[_Iterable[_Union[_common_pb2.SiteProfile, _Mapping]]] = ..., power_mode: _Optional[str] = ..., seed: _Optional[int] = ..., columns: _Optional[_Union[_common_pb2.SiteColumns, _Mapping]] = ...) -> None: ...

class Telemetry(_message.Message):
    __slots__ = ("site_id", "worker_id", "power_draw_w", "step_time_s", "bytes_up", "bytes_down", "energy_j")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    POWER_DRAW_W_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_UP_FIELD_NUMBER: _ClassVar[int]
    BYTES_DOWN_FIELD_NUMBER: _ClassVar[int]
    ENERGY_J_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    worker_id: str
    power_draw_w: float
    step_time_s: float
    bytes_up: int
    bytes_down: int
    energy_j: float
    def __init__(self, site_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., power_draw_w: _Optional[float] = ..., step_time_s: _Optional[float] = ..., bytes_up: _Optional[int] = ..., bytes_down: _Optional[int] = ..., energy_j: _Optional[float] = ...) -> None: ...

class TelemetryAck(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    def __init__(self, ok: bool = ...) -> None: ...

class ClaimSiteRequest(_message.Message):
    __slots__ = ("worker_id", "site_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    site_id: str
    def __init__(self, worker_id: _Optional[str] = ..., site_id: _Optional[str] = ...) -> None: ...

class ClaimSiteResponse(_message.Message):
    __slots__ = ("site", "latency_scale", "bandwidth_scale")
    SITE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SCALE_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_SCALE_FIELD_NUMBER: _ClassVar[int]
    site: _common_pb2.SiteProfile
    latency_scale: float
    bandwidth_scale: float
    def __init__(self, site: _Optional[_Union[_common_pb2.SiteProfile, _Mapping]] = ..., latency_scale: _Optional[float] = ..., bandwidth_scale: _Optional[float] = ...) -> None: ...

class MeasureLinkRequest(_message.Message):
    __slots__ = ("site_id", "worker_id", "probe_address")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROBE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    worker_id: str
    probe_address: str
    def __init__(self, site_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., probe_address: _Optional[str] = ...) -> None: ...

class MeasureLinkResponse(_message.Message):
    __slots__ = ("site", "rtt_s", "probe_bytes")
    SITE_FIELD_NUMBER: _ClassVar[int]
    RTT_S_FIELD_NUMBER: _ClassVar[int]
    PROBE_BYTES_FIELD_NUMBER: _ClassVar[int]
    site: _common_pb2.SiteProfile
    rtt_s: float
    probe_bytes: int
    def __init__(self, site: _Optional[_Union[_common_pb2.SiteProfile, _Mapping]] = ..., rtt_s: _Optional[float] = ..., probe_bytes: _Optional[int] = ...) -> None: ...
