from powertrip.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SelectionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SELECTION_MODE_FEDERATED: _ClassVar[SelectionMode]
    SELECTION_MODE_CENTRALIZED: _ClassVar[SelectionMode]
SELECTION_MODE_FEDERATED: SelectionMode
SELECTION_MODE_CENTRALIZED: SelectionMode

class SelectSitesRequest(_message.Message):
    __slots__ = ("policy", "params", "sites", "history", "update_size_bytes", "round", "site_columns", "settings")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SITES_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    UPDATE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SITE_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    params: _containers.ScalarMap[str, float]
    sites: _containers.RepeatedCompositeFieldContainer[_common_pb2.SiteProfile]
    history: _containers.RepeatedCompositeFieldContainer[_common_pb2.RoundRecord]
    update_size_bytes: float
    round: int
    site_columns: _common_pb2.SiteColumns
    settings: _common_pb2.RunSettings
    def __init__(self, policy: _Optional[str] = ..., params: _Optional[_Mapping[str, float]] = ..., sites: _Optional[_Iterable[_Union[_common_pb2.SiteProfile, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[_common_pb2.RoundRecord, _Mapping]]] = ..., update_size_bytes: _Optional[float] = ..., round: _Optional[int] = ..., site_columns: _Optional[_Union[_common_pb2.SiteColumns, _Mapping]] = ..., settings: _Optional[_Union[_common_pb2.RunSettings, _Mapping]] = ...) -> None: ...

class ShadowDecision(_message.Message):
    __slots__ = ("policy", "k", "predicted_round_time_s", "site_ids")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ROUND_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    k: int
    predicted_round_time_s: float
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[str] = ..., k: _Optional[int] = ..., predicted_round_time_s: _Optional[float] = ..., site_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Selection(_message.Message):
    __slots__ = ("policy", "site_ids", "k", "predicted_round_time_s", "explanation", "mode", "power_cap", "shadows")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SITE_IDS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ROUND_TIME_S_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POWER_CAP_FIELD_NUMBER: _ClassVar[int]
    SHADOWS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    site_ids: _containers.RepeatedScalarFieldContainer[str]
    k: int
    predicted_round_time_s: float
    explanation: str
    mode: SelectionMode
    power_cap: float
    shadows: _containers.RepeatedCompositeFieldContainer[ShadowDecision]
    def __init__(self, policy: _Optional[str] = ..., site_ids: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., predicted_round_time_s: _Optional[float] = ..., explanation: _Optional[str] = ..., mode: _Optional[_Union[SelectionMode, str]] = ..., power_cap: _Optional[float] = ..., shadows: _Optional[_Iterable[_Union[ShadowDecision, _Mapping]]] = ...) -> None: ...

class ListPoliciesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyInfo(_message.Message):
    __slots__ = ("name", "summary", "default_params")
    class DefaultParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    summary: str
    default_params: _containers.ScalarMap[str, float]
    def __init__(self, name: _Optional[str] = ..., summary: _Optional[str] = ..., default_params: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[PolicyInfo]
    def __init__(self, policies: _Optional[_Iterable[_Union[PolicyInfo, _Mapping]]] = ...) -> None: ...
