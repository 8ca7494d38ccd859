"""gRPC face of the policy service."""

from __future__ import annotations

import json
import time

import grpc
from prometheus_client import CollectorRegistry, Gauge, Histogram

from powertrip.v1 import policy_pb2, policy_pb2_grpc
from services.policy.config import PolicyConfig
from services.policy.logic import context_from_request, decide, shadows
from services.policy.policies import REGISTRY, PolicyError
from services.policy.policies.base import CENTRALIZED

SERVICE_NAME = policy_pb2.DESCRIPTOR.services_by_name["Policy"].full_name


class PolicyMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.decision_seconds = Histogram(
            "powertrip_policy_decision_seconds",
            "Time to answer SelectSites",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1),
            registry=registry,
        )
        self.selected = Gauge(
            "powertrip_selected_sites", "Sites in the last selection", ["policy"], registry=registry
        )


class PolicyServicer(policy_pb2_grpc.PolicyServicer):
    def __init__(self, config: PolicyConfig, metrics: PolicyMetrics):
        self.config = config
        self.metrics = metrics

    def SelectSites(self, request, context):
        start = time.perf_counter()
        if not request.sites:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no sites in the request")
        try:
            ctx = context_from_request(request, self.config)
            decision = decide(request.policy, ctx)
            shadow = shadows(request.policy, ctx) if request.shadow else []
        except PolicyError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        ids = ctx.table.ids
        selection = policy_pb2.Selection(
            policy=request.policy,
            site_ids=[ids[i] for i in decision.order],
            k=len(decision.order),
            predicted_round_time_s=decision.predicted_round_time_s,
            explanation=json.dumps(decision.explanation, sort_keys=True),
            mode=(
                policy_pb2.SELECTION_MODE_CENTRALIZED
                if decision.mode == CENTRALIZED
                else policy_pb2.SELECTION_MODE_FEDERATED
            ),
            power_cap=decision.power_cap,
            stop=decision.stop,
        )
        if decision.scores is not None:
            selection.scores.extend(
                policy_pb2.SiteScore(site_id=ids[i], score=float(s))
                for i, s in zip(decision.order, decision.scores, strict=True)
            )
        for s in shadow:
            selection.shadows.add(
                policy=s.policy,
                k=s.k,
                predicted_round_time_s=s.predicted_round_time_s,
                site_ids=[ids[i] for i in s.order],
            )
        self.metrics.decision_seconds.observe(time.perf_counter() - start)
        self.metrics.selected.labels(request.policy).set(len(decision.order))
        return selection

    def ListPolicies(self, request, context):
        return policy_pb2.ListPoliciesResponse(
            policies=[
                policy_pb2.PolicyInfo(
                    name=name, summary=cls.summary, default_params=cls.default_params
                )
                for name, cls in REGISTRY.items()
            ]
        )
