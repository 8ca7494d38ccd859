"""PowerTrip: power- and link-aware site selection for geo-distributed training.

The shared library: generated gRPC stubs (`powertrip.v1`), rpc helpers, the time model,
site profiles, workloads, experiments, reporting and the CLI. Services under `services/`
import this package and never each other.
"""

__version__ = "0.1.0"
