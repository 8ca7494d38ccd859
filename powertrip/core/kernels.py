"""CPU kernels pinned to one code path, so a seed gives the same numbers at any core count.

Why. torch chooses its CPU kernels by the instruction set the CPU has: ATen's vectorised
kernels (AVX2 or AVX-512), oneDNN's convolutions and MKL's matrix products each have one
code path per ISA, and each rounds differently; oneDNN's convolution weight gradient and
MKL's default GEMMs also split their sums by thread count, so the same seed trained to other
digits with 1, 2 or 16 threads. Pinned, every kernel a run uses computes the same bits at
any thread count (measured 1 to 16 threads, `powertrip kernels`), and ATen's kernels are the
same on every x86-64 CPU with AVX2.

How. Three variables, each read once by its library at the first kernel it dispatches (not at
import), so `pin_cpu_kernels` works as long as no tensor op has run yet in the process:
ATen's `ATEN_CPU_CAPABILITY=avx2`, oneDNN's `ONEDNN_MAX_CPU_ISA=AVX2` and MKL's conditional
numerical reproducibility `MKL_CBWR=AVX2,STRICT` (STRICT: GEMMs whose bits do not depend on
the number of threads; plain `AVX2` fixed them only for a fixed thread count). Child
processes (the embedded services, site workers) inherit them. A variable the user set is
kept. Off x86-64 nothing is pinned. A process that trains or evaluates also calls
`configure_torch`, which in pinned mode leaves convolutions to ATen's own kernels (im2col and
MKL's GEMM): oneDNN's split the weight gradient's sum by thread count.

What it does not buy. MKL's CNR branches run on Intel CPUs only: on other CPUs (AMD) MKL
takes its own branch whatever `MKL_CBWR` says (MKL's documentation), so an AMD CPU computes
other bits than an Intel one, and accuracies drift in the third or fourth digit. The one
branch MKL keeps on both (`COMPATIBLE`, SSE2) trains at 0.29 of the native kernels' speed;
so the project records a CPU's kernel family (`kernelcheck.py`) and compares runs byte for
byte within one family, and across families to a tolerance (docs/performance.md).

The cost (bench/run.py, `pinned_vs_native`): on a CPU with AVX-512 the pinned kernels are
slower (0.51 of native on an Intel Xeon with AVX-512, 2026-12-07); `POWERTRIP_CPU_KERNELS=native`
trades identity across CPUs and across `threads_per_worker` for that speed (the run records
which). Native still runs MKL's GEMMs in strict CNR mode (`NATIVE`), which costs nothing
measurable, so its numbers do not depend on the machine's core count either: only oneDNN's
convolution weight gradient splits by threads, and training's threads are a run setting.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import MutableMapping
from pathlib import Path

#: the environment variable that chooses: "pinned" (the default) or "native"
ENV = "POWERTRIP_CPU_KERNELS"
MODES = ("pinned", "native")
#: what "pinned" sets (unless already set): AVX2 kernels, GEMMs whose bits ignore the thread count
PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "AVX2,STRICT",
}
#: what "native" sets (unless already set): the CPU's own kernels, but MKL's GEMMs in strict
#: CNR mode, whose bits ignore the thread count at no measured cost, so that a native run's
#: numbers do not depend on how many cores the machine has (training's threads are a setting)
NATIVE: dict[str, str] = {"MKL_CBWR": "AUTO,STRICT"}
#: every variable a mode sets: what a record of the kernels names, and what a child that
#: must choose its own mode is started without
VARIABLES = tuple(dict.fromkeys([*PINNED, *NATIVE]))
X86_64 = frozenset({"x86_64", "amd64"})


#: the ISA flags worth naming when two CPUs disagree
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "avx_vnni")


def cpu_identity() -> dict[str, str | list[str]]:
    """The CPU's model, vendor and the ISA flags that choose kernels (from /proc/cpuinfo)."""
    model, vendor, flags = "", "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = value.strip()
            elif key == "vendor_id" and vendor == "unknown":
                vendor = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {
        "model": model or platform.processor() or platform.machine(),
        "vendor": vendor,
        "isa": [f for f in ISA_FLAGS if f in flags],
        "cores": str(os.cpu_count() or 1),
    }


class KernelsError(ValueError):
    """POWERTRIP_CPU_KERNELS holds a value that is not one of MODES."""


def kernel_mode(environ: MutableMapping[str, str] | None = None) -> str:
    """The mode POWERTRIP_CPU_KERNELS asks for ("pinned" when unset); a bad value names the
    allowed ones."""
    env = os.environ if environ is None else environ
    mode = env.get(ENV, "").strip().lower() or "pinned"
    if mode not in MODES:
        raise KernelsError(f"{ENV}={env[ENV]!r}: must be one of {', '.join(MODES)}")
    return mode


def pin_cpu_kernels(environ: MutableMapping[str, str] | None = None) -> str:
    """Set the mode's variables (those not set already: PINNED or NATIVE) on an x86-64 CPU,
    before any tensor op of this process; returns the mode. Idempotent."""
    env = os.environ if environ is None else environ
    mode = kernel_mode(env)
    if platform.machine().lower() in X86_64:
        for name, value in (PINNED if mode == "pinned" else NATIVE).items():
            env.setdefault(name, value)
    return mode


def configure_torch() -> None:
    """For a process that trains or evaluates, after `pin_cpu_kernels`: in pinned mode,
    convolutions by ATen's kernels, not oneDNN's (the module's docstring says why). Imports
    torch; idempotent."""
    if kernel_mode() == "pinned":
        import torch

        torch.backends.mkldnn.enabled = False


def kernel_record() -> dict[str, str | bool | None]:
    """What a run records of its kernels: the mode, the ATen kernel set torch chose in this
    process and whether oneDNN was on (None where torch is not loaded: a process that never
    trains), MKL's reproducibility mode and the CPU (a claim of identity names its CPU)."""
    torch = sys.modules.get("torch")
    capability = onednn = None
    if torch is not None:
        capability = str(torch.backends.cpu.get_cpu_capability())
        onednn = bool(torch.backends.mkldnn.enabled)
    return {
        "cpu_kernels": kernel_mode(),
        "cpu_capability": capability,
        "onednn": onednn,
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "cpu": str(cpu_identity()["model"]),
    }
