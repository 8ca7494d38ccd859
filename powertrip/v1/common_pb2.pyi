from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class TensorChunk(_message.Message):
    __slots__ = ("name", "dtype", "shape", "offset", "data", "crc32", "tensor_index", "tensor_count", "crc32c", "encoding", "scale")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    TENSOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    TENSOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    data: bytes
    crc32: int
    tensor_index: int
    tensor_count: int
    crc32c: int
    encoding: str
    scale: float
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., crc32: _Optional[int] = ..., tensor_index: _Optional[int] = ..., tensor_count: _Optional[int] = ..., crc32c: _Optional[int] = ..., encoding: _Optional[str] = ..., scale: _Optional[float] = ...) -> None: ...

class SiteProfile(_message.Message):
    __slots__ = ("site_id", "power_fraction", "distance_miles", "latency_s", "bandwidth_bytes_per_s", "measured_latency_s", "measured_bandwidth_bytes_per_s", "gpus_available", "gpus_effective", "power_source", "alive", "carbon_g_per_kwh")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    POWER_FRACTION_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_MILES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    GPUS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    GPUS_EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    POWER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    CARBON_G_PER_KWH_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    power_fraction: float
    distance_miles: float
    latency_s: float
    bandwidth_bytes_per_s: float
    measured_latency_s: float
    measured_bandwidth_bytes_per_s: float
    gpus_available: int
    gpus_effective: int
    power_source: str
    alive: bool
    carbon_g_per_kwh: float
    def __init__(self, site_id: _Optional[str] = ..., power_fraction: _Optional[float] = ..., distance_miles: _Optional[float] = ..., latency_s: _Optional[float] = ..., bandwidth_bytes_per_s: _Optional[float] = ..., measured_latency_s: _Optional[float] = ..., measured_bandwidth_bytes_per_s: _Optional[float] = ..., gpus_available: _Optional[int] = ..., gpus_effective: _Optional[int] = ..., power_source: _Optional[str] = ..., alive: bool = ..., carbon_g_per_kwh: _Optional[float] = ...) -> None: ...

class SiteColumns(_message.Message):
    __slots__ = ("site_id", "power_fraction", "distance_miles", "latency_s", "bandwidth_bytes_per_s", "measured_latency_s", "measured_bandwidth_bytes_per_s", "gpus_available", "gpus_effective", "alive", "power_source", "carbon_g_per_kwh")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    POWER_FRACTION_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_MILES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    GPUS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    GPUS_EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    POWER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CARBON_G_PER_KWH_FIELD_NUMBER: _ClassVar[int]
    site_id: _containers.RepeatedScalarFieldContainer[str]
    power_fraction: _containers.RepeatedScalarFieldContainer[float]
    distance_miles: _containers.RepeatedScalarFieldContainer[float]
    latency_s: _containers.RepeatedScalarFieldContainer[float]
    bandwidth_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    measured_latency_s: _containers.RepeatedScalarFieldContainer[float]
    measured_bandwidth_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    gpus_available: _containers.RepeatedScalarFieldContainer[int]
    gpus_effective: _containers.RepeatedScalarFieldContainer[int]
    alive: _containers.RepeatedScalarFieldContainer[bool]
    power_source: str
    carbon_g_per_kwh: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, site_id: _Optional[_Iterable[str]] = ..., power_fraction: _Optional[_Iterable[float]] = ..., distance_miles: _Optional[_Iterable[float]] = ..., latency_s: _Optional[_Iterable[float]] = ..., bandwidth_bytes_per_s: _Optional[_Iterable[float]] = ..., measured_latency_s: _Optional[_Iterable[float]] = ..., measured_bandwidth_bytes_per_s: _Optional[_Iterable[float]] = ..., gpus_available: _Optional[_Iterable[int]] = ..., gpus_effective: _Optional[_Iterable[int]] = ..., alive: _Optional[_Iterable[bool]] = ..., power_source: _Optional[str] = ..., carbon_g_per_kwh: _Optional[_Iterable[float]] = ...) -> None: ...

class RoundRecord(_message.Message):
    __slots__ = ("round", "k", "accuracy", "round_time_s", "predicted_round_time_s", "sim_time_s", "site_ids", "reported_site_ids", "site_train_loss", "site_num_samples", "site_duration_s")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ROUND_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ROUND_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SIM_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    SITE_TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    SITE_NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SITE_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    round: int
    k: int
    accuracy: float
    round_time_s: float
    predicted_round_time_s: float
    sim_time_s: float
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    reported_site_ids: _containers.RepeatedScalarFieldContainer[str]
    site_train_loss: _containers.RepeatedScalarFieldContainer[float]
    site_num_samples: _containers.RepeatedScalarFieldContainer[int]
    site_duration_s: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, round: _Optional[int] = ..., k: _Optional[int] = ..., accuracy: _Optional[float] = ..., round_time_s: _Optional[float] = ..., predicted_round_time_s: _Optional[float] = ..., sim_time_s: _Optional[float] = ..., site_ids: _Optional[_Iterable[str]] = ..., reported_site_ids: _Optional[_Iterable[str]] = ..., site_train_loss: _Optional[_Iterable[float]] = ..., site_num_samples: _Optional[_Iterable[int]] = ..., site_duration_s: _Optional[_Iterable[float]] = ...) -> None: ...

class RunSettings(_message.Message):
    __slots__ = ("values",)
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.ScalarMap[str, str]
    def __init__(self, values: _Optional[_Mapping[str, str]] = ...) -> None: ...
