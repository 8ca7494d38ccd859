"""PowerTrip's site selection inside Flower: `PowerTripStrategy` for a Flower ServerApp.

The paper built PowerTrip on Flower (§4) and says the design "can be applied to any system
that allows for the configuration of selected sites in each synchronous training round".
This package is that, for Flower's Message API (Flower >= 1.21): a FedAvg whose
`configure_train` asks a PowerTrip policy (the same code the policy service runs,
`powertrip.core.policies`) which nodes train this round, from each node's power and link
profile, and whose round results feed the policy's history.

    from powertrip.app.flower import PowerTripStrategy, SiteProfile, serve_profile

Needs the `flower` extra (`pip install -e '.[flower]'` from a clone: the name `powertrip` on
PyPI is not this project); `measure_profile` reads GPU power with the `gpu` extra.
"""

from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "powertrip.app.flower needs Flower: pip install -e '.[flower]' in a PowerTrip clone "
        f"(importing flwr failed: {exc})"
    ) from exc

from powertrip.app.flower.measure import (
    gpu_power_fraction,
    link_bandwidth_bytes_per_s,
    link_latency_s,
    measure_profile,
)
from powertrip.app.flower.profiles import (
    PROFILE_KEY,
    PROFILE_QUERY,
    SiteProfile,
    miles_from_latency,
    node_site_id,
    profile_reply,
    serve_profile,
)
from powertrip.app.flower.rounds import RoundLog, read_decisions
from powertrip.app.flower.strategy import PowerTripStrategy

__all__ = [
    "PROFILE_KEY",
    "PROFILE_QUERY",
    "PowerTripStrategy",
    "RoundLog",
    "SiteProfile",
    "gpu_power_fraction",
    "link_bandwidth_bytes_per_s",
    "link_latency_s",
    "measure_profile",
    "miles_from_latency",
    "node_site_id",
    "profile_reply",
    "read_decisions",
    "serve_profile",
]
