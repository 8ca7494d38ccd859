"""How a Flower node tells the strategy its site profile: a `query` message answered with a
ConfigRecord, Flower's own way of asking a node about itself (as `get_properties` was in the
older API). The strategy asks every connected node at the start of each round, because a
site's spare power changes from round to round (paper §3.1).

On the ClientApp side, one of:

    serve_profile(app)  # the profile from the node's node_config (`--node-config`)
    serve_profile(app, lambda context: SiteProfile(power_fraction=0.4, latency_s=0.007,
                                                   bandwidth_bytes_per_s=1.5e8))
    serve_profile(app, lambda context: measure_profile("aggregator.example.org:443"))

A profile that leaves `site_id` empty is named after the node (`node_config["site-id"]`, else
in a simulation its partition, `site-003`, else `node-<Flower node id>`), so every node of a
simulation, which all run one ClientApp, is a site of its own, under the same name each run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from powertrip.core.timemodel import FIBER_SPEED_M_PER_S, METRES_PER_MILE

#: the message type the strategy sends to ask for profiles (Flower's `query` type)
PROFILE_QUERY = "query.powertrip_profile"
#: the ConfigRecord's key in the reply
PROFILE_KEY = "powertrip-profile"
#: node_config keys a profile is read from (`flower-supernode --node-config '...'`)
NODE_CONFIG_KEYS = {
    "site-id": "site_id",
    "power-fraction": "power_fraction",
    "distance-miles": "distance_miles",
    "latency-s": "latency_s",
    "bandwidth-bytes-per-s": "bandwidth_bytes_per_s",
    "alive": "alive",
    "carbon-g-per-kwh": "carbon_g_per_kwh",
}
REQUIRED = ("power_fraction", "latency_s", "bandwidth_bytes_per_s")


def carbon_column(profiles: list[SiteProfile]) -> list[float] | None:
    """Every site's grid intensity, or None unless each node gave one: `lowcarb` needs
    them all, and no other policy reads them."""
    values = [p.carbon_g_per_kwh for p in profiles]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def miles_from_latency(latency_s: float) -> float:
    """The farthest a site can be for this one-way delay, at light's speed in fibre: the
    distance the paper's distance baselines read when a node knows only its latency."""
    return latency_s * FIBER_SPEED_M_PER_S / METRES_PER_MILE


@dataclass(frozen=True, kw_only=True)
class SiteProfile:
    """A node's site, as the policy sees it (the proto SiteProfile's fields the policies read).

    Units are SI: seconds, bytes per second, and power as a fraction. The one exception is
    `distance_miles`, in miles because the paper's distance baselines (the 1,000-mile radius,
    §5.3) are stated in miles; left out, it is `miles_from_latency(latency_s)`.

      site_id: names the site in the policy's ranking and tie-breaks; unique among the nodes
        (empty: `serve_profile` names it after the node).
      power_fraction: p_i(t) in [0, 1], the share of its full power the site may draw now
        (its power cap); local work takes tau / p_i.
      latency_s: one-way propagation delay to the aggregator.
      bandwidth_bytes_per_s: the link's throughput to the aggregator.
      alive: False takes the site out of the choice without dropping the node.
      carbon_g_per_kwh: the site's grid carbon intensity (g CO2/kWh), what `lowcarb` ranks
        by; None (left out) when the node does not know it.
    """

    site_id: str = ""
    power_fraction: float
    latency_s: float
    bandwidth_bytes_per_s: float
    distance_miles: float | None = None
    alive: bool = True
    carbon_g_per_kwh: float | None = None

    def __post_init__(self) -> None:
        if self.distance_miles is None and isinstance(self.latency_s, int | float):
            object.__setattr__(self, "distance_miles", miles_from_latency(self.latency_s))

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
        carbon = self.carbon_g_per_kwh
        if carbon is not None and not (math.isfinite(carbon) and carbon >= 0):
            raise ValueError(f"{self.site_id}: carbon_g_per_kwh must be finite and >= 0")
        return self

    def named(self, site_id: str) -> SiteProfile:
        """This profile under `site_id` when it has none of its own."""
        if self.site_id:
            return self
        return SiteProfile(**{**asdict(self), "site_id": site_id})

    def to_record(self) -> ConfigRecord:
        """The profile as a ConfigRecord; a value the node does not know is left out."""
        return ConfigRecord({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> SiteProfile:
        """From field names to values (a ConfigRecord, a parsed node_config): each value
        converted to its field's type, a missing or unconvertible one named. Not `check`ed:
        a caller may still have to name the site."""
        missing = [name for name in REQUIRED if name not in values]
        if missing:
            raise ValueError(f"profile lacks {', '.join(missing)}")
        try:
            distance, carbon = values.get("distance_miles"), values.get("carbon_g_per_kwh")
            return cls(
                site_id=str(values.get("site_id", "")),
                power_fraction=float(values["power_fraction"]),
                latency_s=float(values["latency_s"]),
                bandwidth_bytes_per_s=float(values["bandwidth_bytes_per_s"]),
                distance_miles=None if distance is None else float(distance),
                alive=_flag(values.get("alive", True)),
                carbon_g_per_kwh=None if carbon is None else float(carbon),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"profile has a value of the wrong type: {exc}") from None

    @classmethod
    def from_record(cls, record: ConfigRecord) -> SiteProfile:
        """The profile a node sent, checked (a node without a site id is refused: the
        strategy names such a node before it gets here)."""
        return cls.from_values(record).check()

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, object]) -> SiteProfile:
        """From a SuperNode's node_config (`flower-supernode --node-config "power-fraction=0.4
        latency-s=0.007 bandwidth-bytes-per-s=1.5e8"`; optional: `site-id`, `distance-miles`,
        `alive`, `carbon-g-per-kwh`)."""
        values = {field: node_config[key] for key, field in NODE_CONFIG_KEYS.items()
                  if key in node_config}  # fmt: skip
        try:
            return cls.from_values(values)
        except ValueError as exc:
            keys = ", ".join(k for k, f in NODE_CONFIG_KEYS.items() if f in REQUIRED)
            raise ValueError(f"node_config: {exc} (node_config needs {keys})") from None


def _flag(value: object) -> bool:
    """A bool from a record or a node_config, where "false" must not read as True."""
    if isinstance(value, str):
        if value.strip().lower() in ("false", "0", "no", ""):
            return False
        if value.strip().lower() in ("true", "1", "yes"):
            return True
        raise ValueError(f"alive: {value!r} is not true or false")
    return bool(value)


def node_site_id(context: Context) -> str:
    """The site id of a node that gives none, stable from run to run where it can be: its
    node_config's `site-id`; else, in a simulation, its `partition-id` (`site-007` of 100,
    zero-padded to sort); else its Flower node id (unique in the run, new in the next: give
    deployed nodes a `site-id`)."""
    config = context.node_config
    if config.get("site-id"):
        return str(config["site-id"])
    if "partition-id" in config:
        width = len(str(max(int(config.get("num-partitions", 0)) - 1, 0)))
        return f"site-{int(config['partition-id']):0{max(width, 3)}d}"
    return f"node-{context.node_id}"


def profile_reply(message: Message, profile: SiteProfile) -> Message:
    """The reply to the strategy's profile query."""
    return Message(RecordDict({PROFILE_KEY: profile.check().to_record()}), reply_to=message)


def serve_profile(
    app: ClientApp, profile_of: Callable[[Context], SiteProfile] | None = None
) -> None:
    """Register the profile query on a ClientApp: `profile_of(context)` gives this node's
    site now (from a power trace, `measure_profile`, ...); without it, the node_config's. A
    profile without a site id is named by `node_site_id`. A profile that cannot be made
    raises, which Flower sends back as an error reply: the strategy leaves the node out."""
    read = profile_of or (lambda context: SiteProfile.from_node_config(context.node_config))

    @app.query("powertrip_profile")
    def _profile(message: Message, context: Context) -> Message:
        return profile_reply(message, read(context).named(node_site_id(context)))
