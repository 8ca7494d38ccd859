"""The pinned CPU kernels (powertrip/core/kernels.py) and what a run records of them
(powertrip/core/provenance.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from powertrip.core import kernels as K
from powertrip.core import provenance

X86 = platform.machine().lower() in K.X86_64


def test_the_mode_is_pinned_unless_asked_and_a_bad_one_names_the_allowed():
    assert K.kernel_mode({}) == "pinned"
    assert K.kernel_mode({K.ENV: " Native "}) == "native"
    with pytest.raises(K.KernelsError, match="must be one of pinned, native"):
        K.kernel_mode({K.ENV: "fast"})


@pytest.mark.skipif(not X86, reason="the pin is for x86-64 CPUs")
def test_pinned_sets_the_three_variables_and_keeps_what_the_user_set():
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert K.pin_cpu_kernels(env) == "pinned"
    assert env == {**K.PINNED, "MKL_CBWR": "COMPATIBLE"}
    assert K.PINNED["MKL_CBWR"] == "AVX2,STRICT"  # strict: GEMM bits ignore the thread count


@pytest.mark.skipif(not X86, reason="the pin is for x86-64 CPUs")
def test_native_keeps_the_cpus_kernels_but_mkls_strict_gemms():
    native = {K.ENV: "native"}
    assert K.pin_cpu_kernels(native) == "native"
    assert native == {K.ENV: "native", "MKL_CBWR": "AUTO,STRICT"}
    mine = {K.ENV: "native", "MKL_CBWR": "AVX512"}
    K.pin_cpu_kernels(mine)
    assert mine["MKL_CBWR"] == "AVX512" and "ATEN_CPU_CAPABILITY" not in mine


@pytest.mark.skipif(not X86, reason="the pin is for x86-64 CPUs")
@pytest.mark.parametrize("mode", ["pinned", "native"])
def test_a_fresh_process_runs_the_kernels_its_mode_names(mode):
    """In a new process (the choice is made once per process), as the services do it."""
    code = (
        "from powertrip.core.kernels import configure_torch, pin_cpu_kernels\n"
        "pin_cpu_kernels(); configure_torch()\n"
        "import torch\n"
        "torch.ones(3).sum()\n"
        "print(torch.backends.cpu.get_cpu_capability(), torch.backends.mkldnn.enabled)\n"
    )
    env = {"PATH": "/usr/bin:/bin", K.ENV: mode}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    capability, onednn = done.stdout.split()
    if mode == "pinned":
        assert capability in ("AVX2", "DEFAULT") and onednn == "False"
    else:
        assert onednn == "True"


def test_a_run_records_the_code_and_the_kernels_it_ran():
    made_by = provenance.collect()
    assert set(made_by) >= {"powertrip_version", "commit", "python", "torch", "cpu_kernels"}
    assert made_by["cpu_kernels"] in K.MODES
    assert made_by["commit"] is None or len(made_by["commit"].removesuffix("-dirty")) == 40


def test_the_cli_refuses_a_bad_mode_before_anything_starts(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", "policies", "--format", "json"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", K.ENV: "fast"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "POWERTRIP_CPU_KERNELS='fast': must be one of pinned, native" in done.stderr
