"""Link shaping for PowerTrip site containers: rate limit + latency on one interface.

Standard library + iproute2 only, so a site worker (or ``tc/shape`` under any python3)
can use it without installing anything.  See tc/README.md for the user's view.

    from powertrip import linkshaping
    linkshaping.has_netem() -> bool
    linkshaping.apply(iface, delay_ms, rate_mbit, mode="auto",
                      relay_listen=None, relay_target=None, state_dir=None) -> str
    linkshaping.clear(iface, state_dir=None) -> str
    linkshaping.status(iface, state_dir=None) -> dict
    linkshaping.plan(iface, delay_ms, rate_mbit, mode="auto", ...) -> Plan   # dry run

``apply`` returns (and the ``tc/shape`` script prints) one line naming the mode used.
Every failure raises :class:`ShapingError` (the scripts exit non-zero with its message)
and leaves the interface as it was: nothing ever runs half-shaped silently.

Modes
-----
``netem`` (hosts whose kernel has sch_netem)
    htb on the egress root limits the rate; a netem child of the htb class adds the
    one-way delay on egress, and a second netem on an ifb device that receives the
    interface's ingress traffic adds the same delay on the way in.  RTT of *all*
    traffic on the interface grows by 2 x delay.  Without ifb the whole 2 x delay goes
    on egress (same RTT).
``htb`` (kernels without netem, e.g. PowerTrip's CI machines)
    htb on the egress root limits the rate; the delay comes from a userspace TCP relay
    (``delay_relay.py``) that holds every byte for ``delay_ms`` in each direction.  Only
    traffic that goes through the relay (``--relay-listen`` -> ``--relay-target``) is
    delayed, RTT through it grows by 2 x delay.  A delay > 0 without a relay is refused.
``auto``
    netem when the kernel has it, else htb.

``delay_ms`` is always the ONE-WAY delay: the round-trip time grows by 2 x delay_ms.
``rate_mbit`` limits egress (what the site sends).

Modules: ``detect`` (does the kernel have netem), ``planning`` (request -> commands),
``actions`` (apply/clear/status), ``relay`` (the relay process), ``delay_relay`` (the
relay program), ``state`` (what was applied), ``commands`` (running tc/ip), ``cli``.
"""

from __future__ import annotations

from .actions import apply, clear, describe_status, status
from .cli import main
from .commands import ShapingError
from .detect import has_netem, netem_support
from .planning import Plan, parse_endpoint, plan

__all__ = [
    "ShapingError",
    "Plan",
    "has_netem",
    "netem_support",
    "plan",
    "apply",
    "clear",
    "status",
    "describe_status",
    "main",
    "parse_endpoint",
]
