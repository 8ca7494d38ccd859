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

from powertrip.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.sitecolumns import ColumnsError, columns_from_profiles, num_sites
from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc, profiler_pb2, profiler_pb2_grpc
from services.aggregator.errors import DependencyDown, RunFailed
from services.aggregator.metrics import AggregatorMetrics

log = logging.getLogger("aggregator")
RPC_RETRIES = 5
T = TypeVar("T")


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
            if on_retry:
                on_retry()
            if attempt == retries - 1:
                raise DependencyDown(
                    f"{what} unavailable after {retries} tries: {exc.code().name}"
                ) from None
            log.warning("%s failed (%s); retrying in %.1fs", what, exc.code().name, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


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

    def restore(
        self,
        last_selection: policy_pb2.Selection | None,
        last_profiles: common_pb2.SiteColumns | None,
    ) -> None:
        """Resume with the last good answers a checkpoint carried."""
        self.last_selection = last_selection
        self.last_profiles = last_profiles

    @contextmanager
    def connected(self, profiler: str, policy: str, credentials: object) -> Iterator[None]:
        """Channels to both dependencies for the length of the run."""
        with (
            open_channel(profiler, credentials) as pch,
            open_channel(policy, credentials) as ych,
        ):
            self.profiler = profiler_pb2_grpc.ProfilerStub(pch)
            self.policy = policy_pb2_grpc.PolicyStub(ych)
            yield

    def profiles(self, at_s: float) -> common_pb2.SiteColumns:
        """Profiles at `at_s` as columns (a copy the caller may mark); the last good ones if
        the profiler is down."""
        try:
            columns = columns_of(
                _retry(
                    lambda: self.profiler.GetProfiles(
                        profiler_pb2.GetProfilesRequest(at_s=at_s, columnar=True), timeout=30
                    ),
                    "profiler.GetProfiles",
                    on_retry=lambda: self.metrics.dependency_retries.labels("profiler").inc(),
                )
            )
            self.last_profiles = columns
        except DependencyDown as exc:
            if self.last_profiles is None:
                raise RunFailed(f"{exc}; no earlier profiles to fall back on") from None
            self.metrics.profiler_fallbacks.inc()
            log.error("%s; reusing the last good profiles", exc)
            columns = self.last_profiles
        out = common_pb2.SiteColumns()
        out.CopyFrom(columns)
        return out

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
            site_columns=profiles,
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
        try:
            selection = _retry(
                lambda: self.policy.SelectSites(request, timeout=30),
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
        """The sites' configured profiles for the summary; [] if the profiler is gone."""
        try:
            profiles = self.profiler.GetProfiles(
                profiler_pb2.GetProfilesRequest(at_s=0), timeout=10
            ).sites
        except (grpc.RpcError, AttributeError):
            return []
        return [
            {
                "site_id": p.site_id,
                "power_fraction": p.power_fraction,
                "distance_miles": p.distance_miles,
                "bandwidth_bytes_per_s": p.bandwidth_bytes_per_s,
            }
            for p in profiles
        ]
