"""What made a run besides its settings: the code (version and commit), the interpreter and
torch, and the CPU kernels. Written into the run's config.yaml under `provenance`, so a run
read a year later says which code and which kernels produced it, and a default can move
without leaving the run's numbers unexplained. Reading a config back ignores this block
(`RunConfig.from_mapping`): it describes a run, it does not configure one.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

from powertrip import __version__
from powertrip.core.kernels import kernel_record

#: the key of the block in config.yaml
KEY = "provenance"
#: the checkout this module was loaded from (no commit when installed from a wheel)
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def git_commit(root: Path = SOURCE_ROOT) -> str | None:
    """The checkout's commit, with "-dirty" when tracked files differ from it; None outside a
    git checkout or without git."""
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def _version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def collect() -> dict[str, str | None]:
    """The provenance block of this process (the aggregator's, whose children share its
    environment and code)."""
    return {
        "powertrip_version": __version__,
        "commit": git_commit(),
        "python": platform.python_version(),
        "torch": _version_of("torch"),
        "machine": platform.machine(),
        **kernel_record(),
    }
