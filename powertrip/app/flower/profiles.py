"""How a Flower node tells the strategy its site profile: a `query` message answered with a
ConfigRecord, Flower's own way of asking a node about itself (as `get_properties` was in the
older API). The strategy asks every connected node at the start of each round, because a
site's spare power changes from round to round (paper §3.1).

On the ClientApp side:

    app = ClientApp()
    serve_profile(app, lambda context: SiteProfile(site_id=..., power_fraction=..., ...))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

#: the message type the strategy sends to ask for profiles (Flower's `query` type)
PROFILE_QUERY = "query.powertrip_profile"
#: the ConfigRecord's key in the reply
PROFILE_KEY = "powertrip-profile"


@dataclass(frozen=True)
class SiteProfile:
    """A node's site, as the policy sees it (the fields of the proto's SiteProfile that the
    policies read). `site_id` names the site in the policy's ranking and tie-breaks; it must
    be unique among the nodes."""

    site_id: str
    power_fraction: float  # p_i(t) in [0, 1]: spare power now
    distance_miles: float
    latency_s: float  # one-way propagation delay
    bandwidth_bytes_per_s: float
    alive: bool = True

    def check(self) -> SiteProfile:
        """The same limits the policy service enforces, named by field."""
        if not self.site_id:
            raise ValueError("site_id must not be empty")
        if not 0.0 <= self.power_fraction <= 1.0:
            raise ValueError(f"{self.site_id}: power_fraction must be in [0, 1]")
        if not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"{self.site_id}: bandwidth_bytes_per_s must be > 0")
        for name in ("distance_miles", "latency_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{self.site_id}: {name} must be finite and >= 0")
        return self

    def to_record(self) -> ConfigRecord:
        return ConfigRecord(asdict(self))

    @classmethod
    def from_record(cls, record: ConfigRecord) -> SiteProfile:
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(record) - {"alive"})
        if missing:
            raise ValueError(f"profile record lacks {', '.join(missing)}")
        values = {k: record[k] for k in names if k in record}
        return cls(
            site_id=str(values["site_id"]),
            power_fraction=float(values["power_fraction"]),
            distance_miles=float(values["distance_miles"]),
            latency_s=float(values["latency_s"]),
            bandwidth_bytes_per_s=float(values["bandwidth_bytes_per_s"]),
            alive=bool(values.get("alive", True)),
        ).check()


def profile_reply(message: Message, profile: SiteProfile) -> Message:
    """The reply to the strategy's profile query."""
    return Message(RecordDict({PROFILE_KEY: profile.check().to_record()}), reply_to=message)


def serve_profile(app: ClientApp, profile_of: Callable[[Context], SiteProfile]) -> None:
    """Register the profile query on a ClientApp: `profile_of(context)` gives this node's
    site now (e.g. from its node_config, a power trace, or NVML)."""

    @app.query("powertrip_profile")
    def _profile(message: Message, context: Context) -> Message:
        return profile_reply(message, profile_of(context))
