"""The golden runs (tests/golden/golden.py) against their recorded hashes, in CI: nine
fixed-seed runs whose rounds.csv and decisions.jsonl must be byte for byte what was recorded.
The kernels are pinned to AVX2 (powertrip.core.kernels), so this holds on any x86-64 CPU with
AVX2, Intel or AMD, with or without AVX-512; elsewhere it is skipped."""

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


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not _has_avx2(),
    reason="the recorded hashes are those of the AVX2 kernels of an x86-64 CPU",
)
def test_the_golden_runs_are_byte_identical_to_their_record():
    done = subprocess.run(
        [sys.executable, str(GOLDEN)], capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "9 runs byte-identical" in done.stdout
