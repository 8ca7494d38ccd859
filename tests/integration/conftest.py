"""Fixtures of the tc/ shaping tests (test_tc_*.py): the two network namespaces of
tc_netns.py, set up once per test module."""

from __future__ import annotations

import pytest

from tests.integration.tc_netns import _SKIP, Net


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    if _SKIP:
        pytest.skip(_SKIP)
    n = Net(tmp_path_factory.mktemp("tcshape"))
    try:
        n.setup()
        yield n
    finally:
        n.teardown()


@pytest.fixture()
def site(net):
    """The shaped side; shaping is cleared after every test."""
    yield net
    net.clear(check=False)
