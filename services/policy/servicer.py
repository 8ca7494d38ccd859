"""gRPC face of the policy service: protos in, `logic.select`, protos out.

Every caller mistake (unknown policy, bad parameter, no sites, bad field) is
INVALID_ARGUMENT with a message naming what was wrong, so the aggregator can fail the run
with that message instead of retrying.
"""

from __future__ import annotations

import json
import logging
import time

import grpc
from prometheus_client import CollectorRegistry, Gauge, Histogram

from powertrip.core.policies import CENTRALIZED, REGISTRY, PolicyError
from powertrip.v1 import policy_pb2, policy_pb2_grpc
from services.policy.config import PolicyConfig
from services.policy.selection import Chosen, select

SERVICE_NAME = policy_pb2.DESCRIPTOR.services_by_name["Policy"].full_name
log = logging.getLogger("policy")


class PolicyMetrics:
    """The service's metrics, on a registry the caller owns (no process-global state)."""

    def __init__(self, registry: CollectorRegistry):
        self.decision_seconds = Histogram(
            "powertrip_policy_decision_seconds",
            "Time to answer SelectSites, shadows included",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1),
            registry=registry,
        )
        self.selected = Gauge(
            "powertrip_policy_selected_sites",
            "Sites in the policy service's last SelectSites answer, by policy",
            ["policy"],
            registry=registry,
        )


def to_selection(policy: str, outcome: Chosen) -> policy_pb2.Selection:
    decision = outcome.decision
    selection = policy_pb2.Selection(
        policy=policy,
        site_ids=outcome.site_ids(decision.order),
        k=decision.k,
        predicted_round_time_s=decision.predicted_round_time_s,
        explanation=json.dumps(decision.explanation, sort_keys=True, separators=(",", ":")),
        mode=(
            policy_pb2.SELECTION_MODE_CENTRALIZED
            if decision.mode == CENTRALIZED
            else policy_pb2.SELECTION_MODE_FEDERATED
        ),
        power_cap=decision.power_cap,
    )
    for s in outcome.shadows:
        selection.shadows.add(
            policy=s.policy,
            k=s.k,
            predicted_round_time_s=s.predicted_round_time_s,
            site_ids=outcome.site_ids(s.order),
        )
    return selection


def policy_infos() -> list[policy_pb2.PolicyInfo]:
    return [
        policy_pb2.PolicyInfo(
            name=name, summary=cls.summary, default_params=cls.Params().as_numbers()
        )
        for name, cls in REGISTRY.items()
    ]


class PolicyServicer(policy_pb2_grpc.PolicyServicer):
    def __init__(self, config: PolicyConfig, metrics: PolicyMetrics):
        self.config = config
        self.metrics = metrics

    def SelectSites(self, request, context):
        start = time.perf_counter()
        try:
            outcome = select(request, self.config)
        except PolicyError as exc:
            log.info("SelectSites(%s) rejected: %s", request.policy, exc)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        selection = to_selection(request.policy, outcome)
        self.metrics.decision_seconds.observe(time.perf_counter() - start)
        self.metrics.selected.labels(request.policy).set(selection.k)
        return selection

    def ListPolicies(self, request, context):
        return policy_pb2.ListPoliciesResponse(policies=policy_infos())
