"""Load and soak tests run under `make reliability` (POWERTRIP_RELIABILITY=1), not `make test`."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("POWERTRIP_RELIABILITY") == "1":
        return
    skip = pytest.mark.skip(reason="load/soak: run with `make reliability`")
    for item in items:
        if "load" in item.keywords:
            item.add_marker(skip)
