"""X.509 facts the services act on: a certificate's fingerprint, names and expiry, and the
revocation list (`--revoked`) the aggregator checks every site's caller against.

Revocation is by site (every certificate that names it: the site is off the deployment) or by
one certificate's SHA-256 fingerprint (the old certificate after a rotation: the site keeps
working with its new one). The list is a small YAML file an operator edits or appends to with
`powertrip revoke`; the aggregator reloads it when it changes, without a restart:

    sites: [site-003]
    certificates: [9f86d081884c7d65...]   # sha256 of the DER, hex (`powertrip revoke --cert`)

Parsing is the `cryptography` library's (the field's standard); nothing here is hand-written
ASN.1.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from powertrip.core.config import ConfigError

#: the revocation file's keys
REVOCATION_KEYS = ("sites", "certificates")
#: how often (seconds) the aggregator looks at the revocation file's modification time
RELOAD_EVERY_S = 1.0


@dataclass(frozen=True)
class CertificateFacts:
    """What the services need from one certificate."""

    fingerprint: str  # SHA-256 of the DER encoding, lower-case hex
    names: frozenset[str]  # CN and subjectAltName DNS entries
    not_after: datetime  # expiry, UTC

    @property
    def expires_at_s(self) -> float:
        """Expiry as a Unix time, for a Prometheus gauge."""
        return self.not_after.timestamp()


def certificate_facts(pem: bytes | str) -> CertificateFacts:
    """Fingerprint, names and expiry of a PEM certificate (the first one in a chain)."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ConfigError(f"not a PEM certificate: {exc}") from exc
    names = {a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names.update(alt.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        pass
    return CertificateFacts(
        # as `openssl x509 -fingerprint -sha256` prints it, without the colons
        fingerprint=cert.fingerprint(hashes.SHA256()).hex(),
        names=frozenset(str(n) for n in names),
        not_after=cert.not_valid_after_utc,
    )


def certificate_file_facts(path: str | Path) -> CertificateFacts:
    """`certificate_facts` of a file; the error names the file."""
    path = Path(path)
    try:
        return certificate_facts(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read certificate {path}: {exc.strerror or exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


@dataclass(frozen=True)
class Revocations:
    """The revoked sites and certificate fingerprints (empty: nothing revoked)."""

    sites: frozenset[str] = frozenset()
    certificates: frozenset[str] = frozenset()

    def refuses(self, sites: set[str] | frozenset[str], cert_fingerprint: str = "") -> str:
        """Why a caller hosting `sites` with that certificate is refused, or '' if it is not."""
        if cert_fingerprint and cert_fingerprint in self.certificates:
            return f"its certificate (sha256 {cert_fingerprint[:16]}...) is revoked"
        revoked = sorted(set(sites) & self.sites)
        if revoked:
            return f"site(s) {', '.join(revoked[:5])} revoked"
        return ""


def load_revocations(path: str | Path) -> Revocations:
    """The revocation file; a missing file revokes nothing (the list starts empty), a bad one
    is an error that names the file and the field."""
    path = Path(path)
    if not path.exists():
        return Revocations()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read revocation list {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict) or set(data) - set(REVOCATION_KEYS):
        unknown = sorted(set(data) - set(REVOCATION_KEYS)) if isinstance(data, dict) else data
        raise ConfigError(
            f"{path}: expected a mapping with keys {', '.join(REVOCATION_KEYS)}; got {unknown}"
        )
    lists = {}
    for key in REVOCATION_KEYS:
        items = data.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{path}: {key}: expected a list of strings")
        lists[key] = items
    bad = [c for c in lists["certificates"] if len(c) != 64 or not _is_hex(c)]
    if bad:
        raise ConfigError(
            f"{path}: certificates: {bad[0]!r} is not a SHA-256 fingerprint (64 hex digits; "
            "`powertrip revoke LIST --cert FILE` computes it)"
        )
    return Revocations(
        sites=frozenset(lists["sites"]),
        certificates=frozenset(c.lower() for c in lists["certificates"]),
    )


def add_revocation(path: str | Path, sites: list[str], certificates: list[str]) -> Revocations:
    """Append sites and fingerprints to the list (made if missing), atomically: the
    aggregator never reads half a file. Returns the new list."""
    path = Path(path)
    old = load_revocations(path)
    new = Revocations(
        sites=old.sites | set(sites),
        certificates=old.certificates | {c.lower() for c in certificates},
    )
    body = {"sites": sorted(new.sites), "certificates": sorted(new.certificates)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        "# revoked sites and certificates (powertrip/rpc/certificates.py); the aggregator "
        "reloads this file\n" + yaml.safe_dump(body, sort_keys=False)
    )
    tmp.replace(path)
    return new


@dataclass
class RevocationList:
    """The aggregator's view of `--revoked`: reloaded when the file's modification time
    changes (looked at no more than once a second). A file that turns bad keeps the last good
    list in force and says why (`error`), so a typo never lets a revoked site back in."""

    path: Path
    on_error: object = None  # callable(str), e.g. a log warning
    current: Revocations = field(default_factory=Revocations)
    error: str = ""
    _stamp: float | None = None
    _checked_at: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.current = load_revocations(self.path)  # a bad file at start-up is fatal
        self._stamp = self._mtime()

    def _mtime(self) -> float | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def get(self) -> Revocations:
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < RELOAD_EVERY_S:
                return self.current
            self._checked_at = now
            stamp = self._mtime()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self.current, self.error = load_revocations(self.path), ""
                except ConfigError as exc:
                    self.error = str(exc)
                    if callable(self.on_error):
                        self.on_error(f"revocation list not reloaded, the last one holds: {exc}")
            return self.current


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True
