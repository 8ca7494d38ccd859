"""`powertrip provision sites.yaml`: every site's bundle at once, each with its own identity.

NVFLARE's provisioning makes one startup kit per site from one project file; this does the
same for a PowerTrip deployment. From a file naming the deployment, the aggregator's and the
profiler's addresses and the sites, it writes into OUT:

* one bundle per site (`OUT/<site>/`, as `powertrip site-bundle` makes it) whose certificate
  names that site (CN = the worker's name, SAN DNS:<site>) and which holds that site's own
  join token;
* `OUT/aggregator/site-tokens.yaml`: every site's token, for the aggregator's `--site-tokens`
  (it then refuses a site whose token is not its own), with `--site-certs` it also refuses a
  site that the caller's certificate does not name.

So the bundle of site A can neither register as B (B's token and certificate are elsewhere)
nor lend its token to another machine without its certificate. The file:

    deployment: example            # a name, for the report
    aggregator: agg.example.org:50051
    profiler: agg.example.org:50052
    image: powertrip-trainer:cuda  # optional, as `site-bundle --image`
    gpus: true                     # optional
    sites:
      - site-000                   # a site id, or
      - {site: site-001, name: vm-eu-1}   # with the worker's name
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from powertrip.app.sitebundle import NAME, BundleError, BundleSpec, make_bundle
from powertrip.core.profiles import site_index

#: the aggregator's copy of every site's token, under OUT/aggregator/
TOKENS_FILE = "site-tokens.yaml"
#: what a token is made of: 24 random bytes, hex (the site worker asks for >= 16 characters)
TOKEN_BYTES = 24
KEYS = ("deployment", "aggregator", "profiler", "image", "gpus", "sites")


class ProvisionError(ValueError):
    """The sites file cannot be provisioned; the message names the field."""


@dataclass(frozen=True)
class SiteEntry:
    site: str
    name: str = ""


@dataclass(frozen=True)
class Plan:
    deployment: str
    aggregator: str
    profiler: str
    sites: tuple[SiteEntry, ...]
    image: str = "powertrip-trainer:cuda"
    gpus: bool = True


def _site(item: Any, where: str) -> SiteEntry:
    if isinstance(item, str):
        item = {"site": item}
    if not isinstance(item, dict) or "site" not in item:
        raise ProvisionError(f"{where}: expected a site id or {{site: ID, name: NAME}}")
    unknown = sorted(set(item) - {"site", "name"})
    if unknown:
        raise ProvisionError(f"{where}: unknown key(s) {unknown}; allowed: site, name")
    site, name = str(item["site"]), str(item.get("name") or "")
    try:
        site_index(site)
    except ValueError:
        raise ProvisionError(f"{where}.site: {site!r} is not a site id (site-000, ...)") from None
    if name and not NAME.match(name):
        raise ProvisionError(f"{where}.name: {name!r}: letters, digits, '.', '_' and '-' only")
    return SiteEntry(site, name)


def load_plan(path: Path) -> Plan:
    """The sites file, checked: every error names the file and the field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ProvisionError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ProvisionError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProvisionError(f"{path}: expected a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ProvisionError(f"{path}: unknown key(s) {unknown}; allowed: {', '.join(KEYS)}")
    for key in ("deployment", "aggregator", "profiler", "sites"):
        if not data.get(key):
            raise ProvisionError(f"{path}: {key}: missing")
    if not isinstance(data["sites"], list):
        raise ProvisionError(f"{path}: sites: expected a list")
    sites = tuple(_site(item, f"{path}: sites[{i}]") for i, item in enumerate(data["sites"]))
    seen: set[str] = set()
    for entry in sites:
        if entry.site in seen:
            raise ProvisionError(f"{path}: sites: {entry.site} is listed twice")
        seen.add(entry.site)
    gpus = data.get("gpus", True)
    if not isinstance(gpus, bool):
        raise ProvisionError(f"{path}: gpus: expected true or false, got {gpus!r}")
    return Plan(
        deployment=str(data["deployment"]),
        aggregator=str(data["aggregator"]),
        profiler=str(data["profiler"]),
        sites=sites,
        image=str(data.get("image") or Plan.image),
        gpus=gpus,
    )


def provision(plan: Plan, secrets_dir: Path, out: Path) -> dict[str, Path]:
    """Write every site's bundle and the aggregator's token file into `out` (which must not
    exist yet: a second provisioning would hand out new tokens beside the old ones).
    Returns site -> its bundle directory."""
    if out.exists():
        raise ProvisionError(f"{out} exists; provision into a new directory")
    tokens = {entry.site: secrets.token_hex(TOKEN_BYTES) for entry in plan.sites}
    out.mkdir(parents=True, mode=0o700)
    bundles = {}
    try:
        for entry in plan.sites:
            spec = BundleSpec(
                secrets=secrets_dir,
                out=out / entry.site,
                aggregator=plan.aggregator,
                profiler=plan.profiler,
                site=entry.site,
                name=entry.name,
                image=plan.image,
                gpus=plan.gpus,
                site_token=tokens[entry.site],
            )
            make_bundle(spec)
            bundles[entry.site] = spec.out
    except BundleError as exc:
        raise ProvisionError(str(exc)) from None
    aggregator = out / "aggregator"
    aggregator.mkdir(mode=0o700)
    path = aggregator / TOKENS_FILE
    path.write_text(yaml.safe_dump(tokens, sort_keys=True))
    path.chmod(0o600)
    return bundles
