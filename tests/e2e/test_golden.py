"""The golden runs (tests/golden/golden.py) against their record, in CI: nine fixed-seed runs
whose rounds.csv and decisions.jsonl must be byte for byte what was recorded for this CPU's
kernel family, with the thread settings of a 2-core and of a 16-core machine. On a family
with no record (a CPU type not measured yet) the static runs are held to the reference
family's within the stated tolerance instead, and the test says which it checked."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "golden.py"


def _has_avx2() -> bool:
    try:
        return " avx2 " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return False


def golden(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(GOLDEN), *args], capture_output=True, text=True, timeout=1500
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not _has_avx2(),
    reason="the records are those of the AVX2 kernels of an x86-64 CPU",
)
@pytest.mark.parametrize("cores", [2, 16])
def test_the_golden_runs_match_their_record_at_2_and_16_cores(cores):
    out = golden("--cores", str(cores))
    assert f"{cores}-core thread settings" in out
    assert "9 runs byte-identical" in out or "4 runs within tolerance" in out, out


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not _has_avx2(),
    reason="the records are those of the AVX2 kernels of an x86-64 CPU",
)
def test_another_kernel_family_is_held_to_the_reference_within_tolerance():
    """The path a CPU type with no record takes, taken here by this CPU's own (native)
    kernels, a family of their own: the static runs agree with the reference in every column
    but accuracy and loss, and those within the tolerance."""
    only = "static-k3,static-k3-fedavg-fp32,random-fig5-2gb,shakespeare-static"
    out = golden("--kernels", "native", "--only", only)
    assert "no record for kernel family" in out and "4 runs within tolerance" in out, out
