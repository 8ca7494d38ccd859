"""The aggregator's Prometheus metrics, shared by the gRPC handlers and the round loop.

Names follow Prometheus conventions (`tests/unit/test_metrics_names.py` checks them):
counters end in `_total`, a unit is the suffix (`_seconds`, `_bytes`), 0-1 values end in
`_ratio`. Alerts on them: deploy/prometheus/rules/powertrip.yml.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.aggregator.records import RoundRow

EXPECTED_REJECT_REASONS = (
    "checksum",
    "non_finite",
    "truncated",
    "oversized",
    "stale_round",
    "duplicate",
    "unauthenticated",
    "wrong_identity",
)
#: powertrip_auth_failures_total{kind}: what the servicer refuses, exported at 0 from the start
AUTH_FAILURE_KINDS = (
    "join_token",
    "site_token",
    "wrong_site_token",
    "site_certificate",
    "session",
    "revoked",
)
#: powertrip_dependency_retries_total{dependency}
DEPENDENCIES = ("profiler", "policy")
#: powertrip_run_state{state}: one of them is 1 (RunStatus.state's values)
RUN_STATES = ("waiting_for_sites", "running", "done", "failed")


class AggregatorMetrics:
    """One set per process, registered on the service's own registry."""

    def __init__(self, registry: CollectorRegistry, round_deadline_s: float = 0.0):
        self.round_duration = Histogram(
            "powertrip_round_duration_seconds",
            "Round time (simulated or wall)",
            ["clock"],
            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600),
            registry=registry,
        )
        self.round_deadline = Gauge(
            "powertrip_round_deadline_seconds",
            "Wall-clock deadline of a round (round_deadline_s); 0 = not set",
            registry=registry,
        )
        self.round_deadline.set(round_deadline_s)
        self.run_info = Gauge(
            "powertrip_run_info",
            "The run this aggregator serves: run_id (its output directory's name), policy, "
            "workload and clock (always 1)",
            ["run_id", "policy", "workload", "clock"],
            registry=registry,
        )
        self.run_state = Gauge(
            "powertrip_run_state",
            "1 for the state the run is in (waiting_for_sites, running, done, failed), 0 else",
            ["state"],
            registry=registry,
        )
        self.last_progress = Gauge(
            "powertrip_last_progress_timestamp_seconds",
            "Unix time the run last made progress: it started running or finished a round "
            "(PowerTripRunStalled watches it)",
            registry=registry,
        )
        self.round = Gauge("powertrip_round", "Last finished round", registry=registry)
        self.selected = Gauge(
            "powertrip_selected_sites",
            "Sites the aggregator selected for the last finished round (k)",
            registry=registry,
        )
        self.accuracy = Gauge(
            "powertrip_global_accuracy_ratio",
            "Held-out accuracy of the global model after the last finished round (0-1)",
            registry=registry,
        )
        self.sim_time = Gauge(
            "powertrip_sim_time_seconds", "Run clock", ["clock"], registry=registry
        )
        self.round_part = Gauge(
            "powertrip_round_part_seconds",
            "Straggler's compute/comm and mean wait of the last round",
            ["part"],
            registry=registry,
        )
        self.transfer = Counter(
            "powertrip_transfer_bytes_total",
            "Model and delta bytes moved",
            ["direction"],
            registry=registry,
        )
        self.rejected = Counter(
            "powertrip_delta_rejected_total",
            "Deltas rejected, by reason",
            ["reason"],
            registry=registry,
        )
        # Export the common reasons at 0 from the start, so dashboards and alerts see the
        # series before the first rejection (a labelled counter has no samples until then).
        for reason in EXPECTED_REJECT_REASONS:
            self.rejected.labels(reason)
        self.policy_fallbacks = Counter(
            "powertrip_policy_fallbacks_total",
            "Rounds that reused the last selection (policy unreachable)",
            registry=registry,
        )
        self.profiler_fallbacks = Counter(
            "powertrip_profiler_fallbacks_total",
            "Rounds that reused the last profiles (profiler unreachable)",
            registry=registry,
        )
        self.dependency_retries = Counter(
            "powertrip_dependency_retries_total",
            "Failed calls to the profiler or policy that were retried",
            ["dependency"],
            registry=registry,
        )
        for dependency in DEPENDENCIES:
            self.dependency_retries.labels(dependency)
        self.site_failures = Counter(
            "powertrip_site_failures_total",
            "Selected sites that missed their round's deadline",
            registry=registry,
        )
        self.auth_failures = Counter(
            "powertrip_auth_failures_total",
            "Calls refused for a missing or wrong token, by kind",
            ["kind"],
            registry=registry,
        )
        for kind in AUTH_FAILURE_KINDS:
            self.auth_failures.labels(kind)
        # the PowerTripCertificateExpiresSoon alert reads both (deploy/prometheus/rules)
        self.certificate_expiry = Gauge(
            "powertrip_certificate_expiry_timestamp_seconds",
            "When this service's own TLS certificates expire (Unix time), by certificate",
            ["certificate"],
            registry=registry,
        )
        self.site_certificate_expiry = Gauge(
            "powertrip_site_certificate_expiry_timestamp_seconds",
            "When the client certificate a site registered with expires (Unix time)",
            ["site"],
            registry=registry,
        )
        self.empty_rounds = Counter(
            "powertrip_empty_rounds_total",
            "Rounds redone because no selected site delivered a delta",
            registry=registry,
        )
        self.dead_sites = Gauge(
            "powertrip_dead_sites", "Sites currently marked dead", registry=registry
        )
        self.upload_resumes = Counter(
            "powertrip_upload_resumes_total",
            "Cut delta uploads continued from the verified bytes the aggregator held",
            registry=registry,
        )

    def show_run(self, run_id: str, policy: str, workload: str, clock: str) -> None:
        """Which run this is, before it starts (it waits for its sites)."""
        self.run_info.labels(run_id, policy, workload, clock).set(1)
        self.show_state("waiting_for_sites")

    def show_state(self, state: str) -> None:
        """The run's state; starting to run counts as progress."""
        for each in RUN_STATES:
            self.run_state.labels(each).set(1 if each == state else 0)
        if state == "running":
            self.last_progress.set_to_current_time()

    def show_collected(self, missed: int, dead: int) -> None:
        """A round's collection: the sites that missed its deadline, and the dead now."""
        if missed:
            self.site_failures.inc(missed)
        self.dead_sites.set(dead)

    def show_round(self, row: RoundRow) -> None:
        """A finished round's gauges and its duration sample."""
        self.round.set(row.round)
        self.last_progress.set_to_current_time()
        self.selected.set(row.k)
        self.accuracy.set(row.accuracy)
        self.round_duration.labels(row.clock).observe(row.round_time_s)
        self.sim_time.labels(row.clock).set(row.sim_time_s)
        self.round_part.labels("compute").set(row.compute_s)
        self.round_part.labels("comm").set(row.comm_s)
        self.round_part.labels("wait").set(row.wait_s)
