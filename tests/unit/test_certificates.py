"""The revocation list (`--revoked`, `powertrip revoke`) and the certificate facts the
aggregator acts on (fingerprint, names, expiry)."""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
import time

import pytest

from powertrip.core.config import ConfigError
from powertrip.rpc import certificates
from powertrip.rpc.certificates import (
    RevocationList,
    Revocations,
    add_revocation,
    certificate_file_facts,
    load_revocations,
)

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing")


@needs_openssl
def test_facts_match_openssl(secrets):
    facts = certificate_file_facts(secrets / "aggregator.crt")
    printed = subprocess.run(
        ["openssl", "x509", "-in", str(secrets / "aggregator.crt"), "-noout", "-fingerprint",
         "-sha256", "-enddate"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    fingerprint = printed.split("Fingerprint=")[1].split()[0].replace(":", "").lower()
    assert facts.fingerprint == fingerprint
    assert "aggregator" in facts.names
    end = " ".join(printed.split("notAfter=")[1].split())  # e.g. "Nov 26 02:41:07 2027 GMT"
    assert facts.expires_at_s == calendar.timegm(time.strptime(end, "%b %d %H:%M:%S %Y %Z"))


def test_a_missing_list_revokes_nothing(tmp_path):
    assert load_revocations(tmp_path / "none.yaml") == Revocations()
    assert Revocations().refuses({"site-000"}, "ab" * 32) == ""


def test_add_then_refuse_by_site_or_fingerprint(tmp_path):
    path = tmp_path / "revoked.yaml"
    add_revocation(path, ["site-003"], [])
    revoked = add_revocation(path, [], ["AB" * 32])
    assert revoked == load_revocations(path)
    assert revoked.sites == {"site-003"} and revoked.certificates == {"ab" * 32}
    assert "site-003 revoked" in revoked.refuses({"site-001", "site-003"})
    assert "certificate" in revoked.refuses({"site-001"}, "ab" * 32)
    assert revoked.refuses({"site-001"}, "cd" * 32) == ""


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("sites: site-1\n", "sites: expected a list of strings"),
        ("certificates: [abc]\n", "is not a SHA-256 fingerprint"),
        ("serials: []\n", "expected a mapping with keys sites, certificates"),
        ("sites: [\n", "invalid YAML"),
    ],
)
def test_a_bad_list_names_the_field(tmp_path, text, names):
    path = tmp_path / "revoked.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=names):
        load_revocations(path)


def test_the_list_reloads_and_a_broken_edit_keeps_the_last_good_one(tmp_path, monkeypatch):
    monkeypatch.setattr(certificates, "RELOAD_EVERY_S", 0.0)
    path = tmp_path / "revoked.yaml"
    warnings: list[str] = []
    live = RevocationList(path, on_error=warnings.append)
    assert live.get() == Revocations()
    add_revocation(path, ["site-002"], [])
    assert live.get().sites == {"site-002"}
    path.write_text("sites: [\n")  # an operator's typo
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert live.get().sites == {"site-002"}, "a broken edit must not lift a revocation"
    assert live.error and "invalid YAML" in warnings[-1]
