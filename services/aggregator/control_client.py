"""The round loop's client for the profiler and the policy.

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

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.rpc.sitecolumns import ColumnsError, columns_from_profiles, num_sites
from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc, profiler_pb2, profiler_pb2_grpc
from services.aggregator.columns import embedded_field, with_embedded
from services.aggregator.errors import DependencyDown, RunFailed
from services.aggregator.metrics import AggregatorMetrics

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


class ControlClient:
    """Profiles and selections for the round loop, with retries and last-good fallbacks."""

    def __init__(self, run: RunConfig, metrics: AggregatorMetrics):
        self.run = run
        self.metrics = metrics
        self.profiler: profiler_pb2_grpc.ProfilerStub | None = None
        self.policy: policy_pb2_grpc.PolicyStub | None = None
        # last good answers of the dependencies, reused while they are down
        self.last_profiles: common_pb2.SiteColumns | None = None
        self.last_selection: policy_pb2.Selection | None = None
        # the profiler's reply that last_profiles was parsed from, and its table's bytes
        # (None where last_profiles came from elsewhere: a checkpoint, an older profiler)
        self._last_reply: bytes | None = None
        self._last_table: memoryview | None = None
        self._get_profiles: Callable | None = None
        self._select_sites: Callable | None = None

    def restore(
        self,
        last_selection: policy_pb2.Selection | None,
        last_profiles: common_pb2.SiteColumns | None,
    ) -> None:
        """Resume with the last good answers a checkpoint carried."""
        self.last_selection = last_selection
        self.last_profiles = last_profiles
        self._last_reply = self._last_table = None

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

    def profiles(self, at_s: float) -> common_pb2.SiteColumns:
        """Profiles at `at_s` as columns; the last good ones if the profiler is down. The
        same object is kept as the last good reply: callers must not change it (the
        aggregator's state marks dead sites in a copy, AggregatorState.hide_dead)."""
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
        self.last_profiles, self._last_reply, self._last_table = columns, reply, table

    def _request_bytes(
        self, request: policy_pb2.SelectSitesRequest, profiles: common_pb2.SiteColumns
    ) -> bytes:
        """`request` with `profiles` as its site columns, serialized. The profiler's own
        bytes are spliced in when `profiles` is its table unchanged (no site marked dead):
        the policy parses the same message either way."""
        if profiles is self.last_profiles and self._last_table is not None:
            return with_embedded(request.SerializeToString(), REQUEST_COLUMNS, self._last_table)
        request.site_columns.CopyFrom(profiles)
        return request.SerializeToString()

    def select(
        self,
        round_no: int,
        profiles: common_pb2.SiteColumns,
        history: Sequence[common_pb2.RoundRecord],
    ) -> policy_pb2.Selection:
        """The policy's selection for the round; the last good one if the policy is down."""
        run = self.run
        request = policy_pb2.SelectSitesRequest(
            policy=run.policy,
            params=run.policy_params,
            history=history,
            update_size_bytes=run.update_size_bytes,
            tau_s=run.tau_s,
            target_accuracy=run.target_accuracy,
            seed=run.seed,
            round=round_no,
            comm_directions=run.comm_directions,
            shadow=run.shadow,
            estimator=run.estimator,
            work_model=run.work_model,
        )
        data = self._request_bytes(request, profiles)
        try:
            selection = _retry(
                lambda: self._select_sites(data, timeout=30),
                "policy.SelectSites",
                on_retry=lambda: self.metrics.dependency_retries.labels("policy").inc(),
            )
        except DependencyDown as exc:
            return self._fallback_selection(round_no, profiles, exc)
        self.last_selection = selection
        return selection

    def _fallback_selection(
        self, round_no: int, profiles: common_pb2.SiteColumns, exc: DependencyDown
    ) -> policy_pb2.Selection:
        """The policy is down: reuse its last good selection, minus sites now dead."""
        alive = {site for site, ok in zip(profiles.site_id, profiles.alive, strict=True) if ok}
        last = self.last_selection
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
