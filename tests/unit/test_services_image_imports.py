"""The `services` image (deploy/Dockerfile: policy and profiler) has no torch: every module
those containers import must load without it.

Why a test here and not only in the container tests: one module-level `import torch` that
reaches `powertrip.core.config` (outer.py once imported fedavg.py for one sum) makes the
policy and profiler containers crash at start, every compose stack come up unhealthy, and
the failure show only under POWERTRIP_DOCKER_TESTS=1. This check runs in the fast tier:
a child interpreter in which `import torch` raises, as it does in that image.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: what the services image runs: its two services' packages and the deploy scripts
IMPORTS = textwrap.dedent(
    """
    import importlib, importlib.util, pkgutil, sys
    sys.modules["torch"] = None  # `import torch` now raises ImportError, as in the image
    for name in {packages!r}:
        package = importlib.import_module(name)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{{name}}.{{module.name}}")
    for path in {scripts!r}:
        spec = importlib.util.spec_from_file_location("deploy_script", path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print("imported without torch")
    """
)


def import_without_torch(packages: list[str], scripts: list[Path]) -> subprocess.CompletedProcess:
    code = IMPORTS.format(packages=packages, scripts=[str(path) for path in scripts])
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_policy_and_profiler_containers_import_without_torch():
    scripts = [ROOT / "deploy" / "entrypoint.py", ROOT / "deploy" / "healthcheck.py"]
    done = import_without_torch(["services.policy", "services.profiler"], scripts)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported without torch" in done.stdout


def test_the_check_fails_for_a_module_that_needs_torch():
    """The guard can fail: the trainer's own package imports torch at module level."""
    done = import_without_torch(["services.site_worker"], [])
    assert done.returncode != 0
    assert "torch" in done.stderr
