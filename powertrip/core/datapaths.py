"""Where the data sets that PowerTrip carries are: the FEMNIST subset, the region catalog,
the power traces, the small language model's base and the speech clips (data/README.md says
what each is and where it comes from).

In a clone (and an editable install) they are the checkout's `data/`. An installed wheel
carries all but the speech clips under `<prefix>/share/powertrip/data` (pyproject.toml's
data-files); a workload's data can be anywhere else with `--data-dir` or
`$POWERTRIP_DATA_DIR`. No torch here: the policy and profiler images read the catalog too.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

ENV = "POWERTRIP_DATA_DIR"
#: the checkout's data/ (two floors above this module)
CHECKOUT = Path(__file__).resolve().parents[2] / "data"
#: where a wheel's data-files land, under an installation's prefix
SHARED = Path("share") / "powertrip" / "data"


def shipped_data_dir() -> Path:
    """The data PowerTrip carries: the checkout's `data/`, else the installed wheel's (in
    this environment's prefix, then the user's); the checkout's path where neither exists,
    so that an error names where it looked."""
    if CHECKOUT.is_dir():
        return CHECKOUT
    for prefix in (sys.prefix, site.getuserbase()):
        installed = Path(prefix) / SHARED
        if installed.is_dir():
            return installed
    return CHECKOUT


def data_root() -> Path:
    """Where the workloads read their data: `$POWERTRIP_DATA_DIR`, else the shipped data."""
    env = os.environ.get(ENV)
    return Path(env) if env else shipped_data_dir()
