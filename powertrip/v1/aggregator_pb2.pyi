from powertrip.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_SCOPE_SITE: _ClassVar[DataScope]
    DATA_SCOPE_POOLED: _ClassVar[DataScope]

class UploadState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UPLOAD_STATE_NONE: _ClassVar[UploadState]
    UPLOAD_STATE_PARTIAL: _ClassVar[UploadState]
    UPLOAD_STATE_ACCEPTED: _ClassVar[UploadState]
DATA_SCOPE_SITE: DataScope
DATA_SCOPE_POOLED: DataScope
UPLOAD_STATE_NONE: UploadState
UPLOAD_STATE_PARTIAL: UploadState
UPLOAD_STATE_ACCEPTED: UploadState

class RegisterRequest(_message.Message):
    __slots__ = ("worker_id", "site_ids", "site_count", "device", "join_token", "site_tokens", "energy_meter")
    class SiteTokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    SITE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_METER_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    site_count: int
    device: str
    join_token: str
    site_tokens: _containers.ScalarMap[str, str]
    energy_meter: str
    def __init__(self, worker_id: _Optional[str] = ..., site_ids: _Optional[_Iterable[str]] = ..., site_count: _Optional[int] = ..., device: _Optional[str] = ..., join_token: _Optional[str] = ..., site_tokens: _Optional[_Mapping[str, str]] = ..., energy_meter: _Optional[str] = ...) -> None: ...

class RunSpec(_message.Message):
    __slots__ = ("run_id", "workload", "num_sites", "seed", "data_dir", "peft", "delta_encoding", "settings")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    NUM_SITES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    PEFT_FIELD_NUMBER: _ClassVar[int]
    DELTA_ENCODING_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    workload: str
    num_sites: int
    seed: int
    data_dir: str
    peft: str
    delta_encoding: str
    settings: _common_pb2.RunSettings
    def __init__(self, run_id: _Optional[str] = ..., workload: _Optional[str] = ..., num_sites: _Optional[int] = ..., seed: _Optional[int] = ..., data_dir: _Optional[str] = ..., peft: _Optional[str] = ..., delta_encoding: _Optional[str] = ..., settings: _Optional[_Union[_common_pb2.RunSettings, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("worker_id", "site_ids", "spec", "session_token")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    spec: RunSpec
    session_token: str
    def __init__(self, worker_id: _Optional[str] = ..., site_ids: _Optional[_Iterable[str]] = ..., spec: _Optional[_Union[RunSpec, _Mapping]] = ..., session_token: _Optional[str] = ...) -> None: ...

class NextTaskRequest(_message.Message):
    __slots__ = ("worker_id", "wait_s", "session_token")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    wait_s: float
    session_token: str
    def __init__(self, worker_id: _Optional[str] = ..., wait_s: _Optional[float] = ..., session_token: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "round", "site_id", "model_version", "local_steps", "lr", "batch_size", "seed", "data_scope")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOCAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DATA_SCOPE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    round: int
    site_id: str
    model_version: int
    local_steps: int
    lr: float
    batch_size: int
    seed: int
    data_scope: DataScope
    def __init__(self, task_id: _Optional[str] = ..., round: _Optional[int] = ..., site_id: _Optional[str] = ..., model_version: _Optional[int] = ..., local_steps: _Optional[int] = ..., lr: _Optional[float] = ..., batch_size: _Optional[int] = ..., seed: _Optional[int] = ..., data_scope: _Optional[_Union[DataScope, str]] = ...) -> None: ...

class NextTaskResponse(_message.Message):
    __slots__ = ("tasks", "shutdown")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    shutdown: bool
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., shutdown: bool = ...) -> None: ...

class DownloadModelRequest(_message.Message):
    __slots__ = ("worker_id", "model_version", "session_token")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    model_version: int
    session_token: str
    def __init__(self, worker_id: _Optional[str] = ..., model_version: _Optional[int] = ..., session_token: _Optional[str] = ...) -> None: ...

class DeltaHeader(_message.Message):
    __slots__ = ("task_id", "site_id", "round", "model_version", "num_samples", "train_loss", "compute_wall_s", "steps", "worker_id", "session_token", "resume", "energy_j", "encoding_error")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    ENERGY_J_FIELD_NUMBER: _ClassVar[int]
    ENCODING_ERROR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    site_id: str
    round: int
    model_version: int
    num_samples: int
    train_loss: float
    compute_wall_s: float
    steps: int
    worker_id: str
    session_token: str
    resume: UploadPosition
    energy_j: float
    encoding_error: float
    def __init__(self, task_id: _Optional[str] = ..., site_id: _Optional[str] = ..., round: _Optional[int] = ..., model_version: _Optional[int] = ..., num_samples: _Optional[int] = ..., train_loss: _Optional[float] = ..., compute_wall_s: _Optional[float] = ..., steps: _Optional[int] = ..., worker_id: _Optional[str] = ..., session_token: _Optional[str] = ..., resume: _Optional[_Union[UploadPosition, _Mapping]] = ..., energy_j: _Optional[float] = ..., encoding_error: _Optional[float] = ...) -> None: ...

class UploadPosition(_message.Message):
    __slots__ = ("tensor_index", "offset")
    TENSOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    tensor_index: int
    offset: int
    def __init__(self, tensor_index: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class UploadDeltaRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: DeltaHeader
    chunk: _common_pb2.TensorChunk
    def __init__(self, header: _Optional[_Union[DeltaHeader, _Mapping]] = ..., chunk: _Optional[_Union[_common_pb2.TensorChunk, _Mapping]] = ...) -> None: ...

class UploadDeltaResponse(_message.Message):
    __slots__ = ("accepted", "bytes_received", "reason")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    bytes_received: int
    reason: str
    def __init__(self, accepted: bool = ..., bytes_received: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class UploadStatusRequest(_message.Message):
    __slots__ = ("task_id", "site_id", "round", "worker_id", "session_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    site_id: str
    round: int
    worker_id: str
    session_token: str
    def __init__(self, task_id: _Optional[str] = ..., site_id: _Optional[str] = ..., round: _Optional[int] = ..., worker_id: _Optional[str] = ..., session_token: _Optional[str] = ...) -> None: ...

class UploadStatusResponse(_message.Message):
    __slots__ = ("state", "next", "bytes_held", "total_bytes")
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    BYTES_HELD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    state: UploadState
    next: UploadPosition
    bytes_held: int
    total_bytes: int
    def __init__(self, state: _Optional[_Union[UploadState, str]] = ..., next: _Optional[_Union[UploadPosition, _Mapping]] = ..., bytes_held: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunStatus(_message.Message):
    __slots__ = ("run_id", "state", "round", "max_rounds", "accuracy", "sim_time_s", "k", "registered_sites", "num_sites", "message", "last", "dead_sites")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    MAX_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    SIM_TIME_S_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_SITES_FIELD_NUMBER: _ClassVar[int]
    NUM_SITES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    DEAD_SITES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: str
    round: int
    max_rounds: int
    accuracy: float
    sim_time_s: float
    k: int
    registered_sites: int
    num_sites: int
    message: str
    last: _common_pb2.RoundRecord
    dead_sites: int
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[str] = ..., round: _Optional[int] = ..., max_rounds: _Optional[int] = ..., accuracy: _Optional[float] = ..., sim_time_s: _Optional[float] = ..., k: _Optional[int] = ..., registered_sites: _Optional[int] = ..., num_sites: _Optional[int] = ..., message: _Optional[str] = ..., last: _Optional[_Union[_common_pb2.RoundRecord, _Mapping]] = ..., dead_sites: _Optional[int] = ...) -> None: ...
