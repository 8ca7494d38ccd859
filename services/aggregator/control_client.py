"""The round loop's client for the profiler and the policy.

The protobuf edge of the round loop: the profiler's profiles and the policy's selection are
handed on as the plain values of domain.py, and the run's history goes out as messages, all
converted here. The last good replies are kept as the messages they came as (a checkpoint
holds their bytes, checkpoint_replies/restore).

Every call is retried with backoff; a dependency that stays down is answered with its
last good reply (profiles, or the last selection minus sites now dead), so one outage
does not end a run. The last good replies are checkpointed with the run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import grpc
import numpy as np

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.rpc.runsettings import settings_message
from powertrip.rpc.sitecolumns import ColumnsError, columns_from_profiles, num_sites
from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc, profiler_pb2, profiler_pb2_grpc
from services.aggregator.columns import embedded_field, with_embedded
from services.aggregator.domain import NUMBER_COLUMNS, Profiles, Selection, Shadow
from services.aggregator.errors import DependencyDown, RunFailed
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.run_result import CheckpointRecord, RoundRecord

log = logging.getLogger("aggregator")
RPC_RETRIES = 5
T = TypeVar("T")


def _method(module, service: str, method: str) -> str:
    return f"/{module.DESCRIPTOR.services_by_name[service].full_name}/{method}"


GET_PROFILES = _method(profiler_pb2, "Profiler", "GetProfiles")
SELECT_SITES = _method(policy_pb2, "Policy", "SelectSites")
#: field numbers of the profile table in the profiler's reply and the policy's request
_REPLY = profiler_pb2.GetProfilesResponse.DESCRIPTOR.fields_by_name
REPLY_COLUMNS, REPLY_SITES = _REPLY["columns"].number, _REPLY["sites"].number
REQUEST_COLUMNS = policy_pb2.SelectSitesRequest.DESCRIPTOR.fields_by_name["site_columns"].number


def _retry(
    call: Callable[[], T],
    what: str,
    retries: int = RPC_RETRIES,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Call a dependency with exponential backoff; the run never dies on one blip.

    A wrong request (INVALID_ARGUMENT, NOT_FOUND) fails at once: retrying cannot fix it.
    Anything else that outlasts the retries raises DependencyDown, which callers answer
    with their last good value.
    """
    delay = 0.2
    for attempt in range(retries):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
                raise RunFailed(f"{what}: {exc.details()}") from None
            if _over_message_limit(exc):
                raise RunFailed(
                    f"{what}: {exc.details()}: the sites' profiles do not fit in one gRPC "
                    "message at this site count"
                ) from None
            if on_retry:
                on_retry()
            if attempt == retries - 1:
                raise DependencyDown(
                    f"{what} unavailable after {retries} tries: {exc.code().name}"
                ) from None
            log.warning("%s failed (%s); retrying in %.1fs", what, exc.code().name, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _over_message_limit(exc: grpc.RpcError) -> bool:
    """A message over gRPC's size limit: the same on every retry, so not retried."""
    details = exc.details() or ""
    return exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details


def columns_of(reply: profiler_pb2.GetProfilesResponse) -> common_pb2.SiteColumns:
    """The reply's sites as columns, whichever form it carries: a profiler from before
    `columnar` (and checkpoints written then) answers with one message per site."""
    if reply.HasField("columns"):
        try:
            num_sites(reply.columns)
        except ColumnsError as exc:
            raise RunFailed(f"profiler sent malformed profiles: {exc}") from None
        return reply.columns
    return columns_from_profiles(reply.sites)


# ---- messages <-> the loop's values ----------------------------------------------------------
_DTYPES = dict.fromkeys(NUMBER_COLUMNS, np.float64) | {
    "gpus_available": np.int64,
    "gpus_effective": np.int64,
    "alive": np.bool_,
}


def profiles_of(columns: common_pb2.SiteColumns) -> Profiles:
    """The profiles of a SiteColumns message, with the same values."""
    arrays = {
        name: np.fromiter(
            getattr(columns, name), dtype=_DTYPES[name], count=len(getattr(columns, name))
        )
        for name in NUMBER_COLUMNS
    }
    return Profiles(site_id=tuple(columns.site_id), power_source=columns.power_source, **arrays)


def columns_message(profiles: Profiles) -> common_pb2.SiteColumns:
    """The SiteColumns message of `profiles` (an empty column stays empty)."""
    columns = common_pb2.SiteColumns(site_id=profiles.site_id, power_source=profiles.power_source)
    for name, values in profiles.columns().items():
        getattr(columns, name).extend(values)
    return columns


def selection_of(message: policy_pb2.Selection) -> Selection:
    """The policy's Selection message as the loop reads it."""
    return Selection(
        policy=message.policy,
        site_ids=tuple(message.site_ids),
        k=message.k,
        predicted_round_time_s=message.predicted_round_time_s,
        explanation=message.explanation,
        mode=policy_pb2.SelectionMode.Name(message.mode).split("_")[-1].lower(),
        power_cap=message.power_cap,
        shadows=tuple(
            Shadow(s.policy, s.k, s.predicted_round_time_s, tuple(s.site_ids))
            for s in message.shadows
        ),
    )


def round_record_message(record: RoundRecord) -> common_pb2.RoundRecord:
    """A history record as the policy (and GetStatus) gets it."""
    return common_pb2.RoundRecord(
        round=record.round,
        k=record.k,
        accuracy=record.accuracy,
        round_time_s=record.round_time_s,
        predicted_round_time_s=record.predicted_round_time_s,
        sim_time_s=record.sim_time_s,
        site_ids=record.site_ids,
        reported_site_ids=record.reported_site_ids,
        site_train_loss=record.site_train_loss,
        site_num_samples=record.site_num_samples,
        site_duration_s=record.site_duration_s,
    )


class ControlClient:
    """Profiles and selections for the round loop, with retries and last-good fallbacks."""

    def __init__(self, run: RunConfig, metrics: AggregatorMetrics):
        self.run = run
        self.metrics = metrics
        self.profiler: profiler_pb2_grpc.ProfilerStub | None = None
        self.policy: policy_pb2_grpc.PolicyStub | None = None
        # last good answers of the dependencies, reused while they are down: the profiles
        # as handed to the loop and the message they came from, the policy's selection
        self.last_profiles: Profiles | None = None
        self._last_columns: common_pb2.SiteColumns | None = None
        self._last_selection: policy_pb2.Selection | None = None
        #: the profiles last serialized for a checkpoint, and their bytes
        self._saved_profiles: tuple[Profiles, bytes] | None = None
        #: the history records last sent, and their messages (the history only grows)
        self._history: list[tuple[RoundRecord, common_pb2.RoundRecord]] = []
        # the profiler's reply that last_profiles was parsed from, and its table's bytes
        # (None where last_profiles came from elsewhere: a checkpoint, an older profiler)
        self._last_reply: bytes | None = None
        self._last_table: memoryview | None = None
        self._get_profiles: Callable | None = None
        self._select_sites: Callable | None = None

    @property
    def last_selection(self) -> Selection | None:
        """The policy's last good selection."""
        return None if self._last_selection is None else selection_of(self._last_selection)

    def restore(
        self,
        last_selection: bytes | None,
        last_profiles: bytes | None,
        last_profiles_reply: bytes | None = None,
    ) -> None:
        """Resume with the last good answers a checkpoint carried, as their messages'
        bytes: a Selection, and a SiteColumns (or, in checkpoints written before the
        profiles had a file of their own, the profiler's whole GetProfilesResponse)."""
        self._last_selection = (
            None if last_selection is None else policy_pb2.Selection.FromString(last_selection)
        )
        columns = None
        if last_profiles is not None:
            reply = profiler_pb2.GetProfilesResponse(
                columns=common_pb2.SiteColumns.FromString(last_profiles)
            )
            columns = columns_of(reply)
        elif last_profiles_reply is not None:
            columns = columns_of(profiler_pb2.GetProfilesResponse.FromString(last_profiles_reply))
        self._last_columns = columns
        self.last_profiles = None if columns is None else profiles_of(columns)
        self._last_reply = self._last_table = None

    def checkpoint_into(self, record: CheckpointRecord) -> None:
        """The control client's part of a checkpoint: its last good replies."""
        record.last_selection, record.last_profiles = self.checkpoint_replies()

    def restore_checkpoint(self, record: CheckpointRecord) -> None:
        """Resume with the replies `record` carries."""
        self.restore(record.last_selection, record.last_profiles, record.last_profiles_reply)

    def checkpoint_replies(self) -> tuple[bytes | None, bytes | None]:
        """The last good selection (without its shadow decisions, which nothing reads back)
        and profiles as a checkpoint keeps them: their messages' deterministic bytes. The
        same profiles give the same bytes object (they are serialized once)."""
        selection = None
        if self._last_selection is not None:
            kept = policy_pb2.Selection()
            kept.CopyFrom(self._last_selection)
            kept.ClearField("shadows")
            selection = kept.SerializeToString(deterministic=True)
        profiles = None
        if self.last_profiles is not None:
            saved = self._saved_profiles
            if saved is None or saved[0] is not self.last_profiles:
                data = self._last_columns.SerializeToString(deterministic=True)
                saved = self._saved_profiles = (self.last_profiles, data)
            profiles = saved[1]
        return selection, profiles

    @contextmanager
    def connected(self, profiler: str, policy: str, credentials: object) -> Iterator[None]:
        """Channels to both dependencies for the length of the run."""
        with (
            open_channel(profiler, credentials) as pch,
            open_channel(policy, credentials) as ych,
        ):
            self.profiler = profiler_pb2_grpc.ProfilerStub(pch)
            self.policy = policy_pb2_grpc.PolicyStub(ych)
            # the two calls whose messages grow with the sites, on bytes (columns.py)
            self._get_profiles = pch.unary_unary(
                GET_PROFILES,
                request_serializer=profiler_pb2.GetProfilesRequest.SerializeToString,
                response_deserializer=None,
            )
            self._select_sites = ych.unary_unary(
                SELECT_SITES,
                request_serializer=None,
                response_deserializer=policy_pb2.Selection.FromString,
            )
            yield

    def profiles(self, at_s: float) -> Profiles:
        """Profiles at `at_s` as columns; the last good ones if the profiler is down. The
        same object is kept as the last good reply: callers must not change it (the
        aggregator's state marks dead sites in a copy, WorkerRegistry.hide_dead)."""
        try:
            reply = _retry(
                lambda: self._get_profiles(
                    profiler_pb2.GetProfilesRequest(at_s=at_s, columnar=True), timeout=30
                ),
                "profiler.GetProfiles",
                on_retry=lambda: self.metrics.dependency_retries.labels("profiler").inc(),
            )
            if reply != self._last_reply or self.last_profiles is None:
                self._parse_profiles(reply)
            columns = self.last_profiles  # the same bytes as last time: parsed then
        except DependencyDown as exc:
            if self.last_profiles is None:
                raise RunFailed(f"{exc}; no earlier profiles to fall back on") from None
            self.metrics.profiler_fallbacks.inc()
            log.error("%s; reusing the last good profiles", exc)
            columns = self.last_profiles
        return columns

    def _parse_profiles(self, reply: bytes) -> None:
        """Make `reply` the last good profiles, keeping its bytes and its table's."""
        columns = columns_of(profiler_pb2.GetProfilesResponse.FromString(reply))
        try:
            table = embedded_field(reply, REPLY_COLUMNS, give_up_on=REPLY_SITES)
        except ValueError:
            table = None
        self.last_profiles, self._last_columns = profiles_of(columns), columns
        self._last_reply, self._last_table = reply, table

    def _request_bytes(self, request: policy_pb2.SelectSitesRequest, profiles: Profiles) -> bytes:
        """`request` with `profiles` as its site columns, serialized. The profiler's own
        bytes are spliced in when `profiles` is its table unchanged (no site marked dead):
        the policy parses the same message either way."""
        if profiles is self.last_profiles:
            if self._last_table is not None:
                return with_embedded(request.SerializeToString(), REQUEST_COLUMNS, self._last_table)
            request.site_columns.CopyFrom(self._last_columns)
        else:
            request.site_columns.CopyFrom(columns_message(profiles))
        return request.SerializeToString()

    def _history_messages(self, history: Sequence[RoundRecord]) -> list[common_pb2.RoundRecord]:
        """`history` as messages; the records sent before are not converted again."""
        known = self._history
        same = 0
        while same < min(len(known), len(history)) and known[same][0] is history[same]:
            same += 1
        del known[same:]
        known.extend((record, round_record_message(record)) for record in history[same:])
        return [message for _, message in known]

    def select(
        self,
        round_no: int,
        profiles: Profiles,
        history: Sequence[RoundRecord],
    ) -> Selection:
        """The policy's selection for the round; the last good one if the policy is down."""
        run = self.run
        request = policy_pb2.SelectSitesRequest(
            policy=run.policy,
            params=run.policy_params,
            history=self._history_messages(history),
            update_size_bytes=run.update_size_bytes,
            round=round_no,
            settings=settings_message(run, "policy"),
        )
        data = self._request_bytes(request, profiles)
        try:
            selection = _retry(
                lambda: self._select_sites(data, timeout=30),
                "policy.SelectSites",
                on_retry=lambda: self.metrics.dependency_retries.labels("policy").inc(),
            )
        except DependencyDown as exc:
            return selection_of(self._fallback_selection(round_no, profiles, exc))
        self._last_selection = selection
        return selection_of(selection)

    def _fallback_selection(
        self, round_no: int, profiles: Profiles, exc: DependencyDown
    ) -> policy_pb2.Selection:
        """The policy is down: reuse its last good selection, minus sites now dead."""
        alive = {site for site, ok in zip(profiles.site_id, profiles.alive, strict=True) if ok}
        last = self._last_selection
        if last is None or not alive.intersection(last.site_ids):
            raise RunFailed(f"{exc}; no earlier selection to fall back on") from None
        selection = policy_pb2.Selection()
        selection.CopyFrom(last)
        del selection.site_ids[:]
        selection.site_ids.extend(s for s in last.site_ids if s in alive)
        selection.k = len(selection.site_ids)
        del selection.shadows[:]
        selection.explanation = json.dumps(
            {"fallback": "last good selection", "reason": str(exc), "from_round": round_no - 1}
        )
        self.metrics.policy_fallbacks.inc()
        log.error(
            "round %d: %s; reusing the last good selection (k=%d)", round_no, exc, selection.k
        )
        return selection

    def site_table(self) -> list[dict]:
        """The sites' configured profiles for the summary; [] if the profiler is gone.
        Asked for as columns: a tenth of the bytes and Python objects of one message per
        site (100,000 messages pass neither the message limit nor quickly)."""
        try:
            columns = columns_of(
                self.profiler.GetProfiles(
                    profiler_pb2.GetProfilesRequest(at_s=0, columnar=True), timeout=30
                )
            )
        except (grpc.RpcError, AttributeError, RunFailed):
            return []
        return [
            {
                "site_id": site,
                "power_fraction": power,
                "distance_miles": distance,
                "bandwidth_bytes_per_s": bandwidth,
            }
            for site, power, distance, bandwidth in zip(
                columns.site_id[:],
                columns.power_fraction[:],
                columns.distance_miles[:],
                columns.bandwidth_bytes_per_s[:],
                strict=True,
            )
        ]
