"""tc/ shaping's rate limit, measured with real traffic between two network namespaces
(tc_netns.py)."""

from __future__ import annotations

import pytest

from tests.integration.tc_netns import _SKIP, AGG_IP, SINK_PORT, _within

# --------------------------------------------------------------------------- rate


@pytest.mark.parametrize("rate", [50, 200])
@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_rate_limit_measured_with_real_traffic(site, rate):
    out = site.shape("--delay-ms", "0", "--rate-mbit", str(rate)).stdout
    assert f"rate {rate} mbit via htb" in out, out
    assert "htb" in site.qdiscs()
    nbytes = int(rate * 1e6 / 8 * 1.6)  # ~1.6 s of traffic at the configured rate
    r = site.tool_in_site("send", AGG_IP, str(SINK_PORT), str(nbytes))
    print(
        f"rate {rate} mbit: measured {r['mbit']:.1f} mbit (receiver), "
        f"{r['wall_mbit']:.1f} mbit (sender wall clock), {nbytes / 1e6:.1f} MB"
    )
    assert r["bytes"] == nbytes
    assert _within(r["mbit"], rate), r
