from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetWorkerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "site_ids", "device", "tasks_done", "bytes_up", "bytes_down", "aggregator", "state")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    BYTES_UP_FIELD_NUMBER: _ClassVar[int]
    BYTES_DOWN_FIELD_NUMBER: _ClassVar[int]
    AGGREGATOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    device: str
    tasks_done: int
    bytes_up: int
    bytes_down: int
    aggregator: str
    state: str
    def __init__(self, worker_id: _Optional[str] = ..., site_ids: _Optional[_Iterable[str]] = ..., device: _Optional[str] = ..., tasks_done: _Optional[int] = ..., bytes_up: _Optional[int] = ..., bytes_down: _Optional[int] = ..., aggregator: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...
