"""`powertrip provision sites.yaml`: one bundle per site, each with a certificate that names
its site and a join token of its own, and the aggregator's file of every site's token; a bad
sites file is refused by the field (powertrip/app/provision.py). The aggregator enforcing
them: tests/reliability/test_site_identity.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from powertrip.app.cli import main
from powertrip.app.provision import ProvisionError, load_plan
from powertrip.rpc.sitetokens import load_site_tokens

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")

PLAN = {
    "deployment": "example",
    "aggregator": "agg.example.org:50051",
    "profiler": "agg.example.org:50052",
    "gpus": False,
    "sites": ["site-000", {"site": "site-001", "name": "vm-eu-1"}],
}


def _write(tmp_path: Path, plan: dict) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def _names(cert: Path) -> str:
    return subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-subject", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def test_each_site_gets_its_own_certificate_and_token(secrets, tmp_path, capsys):
    out = tmp_path / "kits"
    code = main(["provision", str(_write(tmp_path, PLAN)), "--secrets", str(secrets),
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    tokens = load_site_tokens(out / "aggregator" / "site-tokens.yaml")
    assert sorted(tokens) == ["site-000", "site-001"] and len(set(tokens.values())) == 2
    for site in tokens:
        own = load_site_tokens(out / site / "site-tokens.yaml")
        assert own == {site: tokens[site]}  # its own token and no other site's
        assert (out / site / "site-tokens.yaml").stat().st_mode & 0o077 == 0
        env = (out / site / "site.env").read_text()
        assert "POWERTRIP_SITE_TOKENS=/run/secrets/powertrip/site-tokens.yaml" in env
        assert f"DNS:{site}" in _names(out / site / "tls.crt")
    assert "CN = vm-eu-1" in _names(out / "site-001" / "tls.crt")
    assert not (out / "site-000" / "ca.key").exists()
    assert "--site-certs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"aggregator": None}, "aggregator: missing"),
        ({"sites": ["site-000", "site-000"]}, "site-000 is listed twice"),
        ({"sites": ["node-7"]}, "sites[0].site: 'node-7' is not a site id"),
        ({"sites": [{"site": "site-001", "host": "x"}]}, "unknown key(s) ['host']"),
        ({"gpus": "yes"}, "gpus: expected true or false"),
        ({"region": "eu"}, "unknown key(s) ['region']"),
    ],
)
def test_a_bad_sites_file_is_refused_by_the_field(tmp_path, change, message):
    plan = {**PLAN, **change}
    plan = {k: v for k, v in plan.items() if v is not None}
    with pytest.raises(ProvisionError) as err:
        load_plan(_write(tmp_path, plan))
    assert message in str(err.value)


def test_provisioning_into_an_existing_directory_is_refused(secrets, tmp_path, capsys):
    (tmp_path / "kits").mkdir()
    code = main(["provision", str(_write(tmp_path, PLAN)), "--secrets", str(secrets),
                 "--out", str(tmp_path / "kits")])  # fmt: skip
    assert code == 2 and "exists; provision into a new directory" in capsys.readouterr().err
