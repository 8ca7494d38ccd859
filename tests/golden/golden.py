"""Golden runs: nine fixed-seed runs whose outputs must not change in a refactor.

A behaviour-preserving change (moving modules, splitting a loop, a new configuration path)
should leave every simulated-clock run's ``rounds.csv`` and ``decisions.jsonl`` byte for
byte as they were. This script makes the nine runs of ``RUNS`` and compares the SHA-256 of
those files with ``expected.json`` (``--check``, the default), or writes it (``--record``,
only when a change is *meant* to move results; say so in the commit).

The runs cover the parts a refactor is most likely to disturb: each rule of the policy
service (the paper's PowerTrip, ``adaptive``, static, highest-power, Oort, random), the
product's defaults (Nesterov outer step, int8 deltas) and the paper's FedAvg with fp32,
both power sources, both work models, both link models, a larger update and a second
workload. They train for real on the repository's data (FEMNIST and Shakespeare subsets),
10 sites, 3-4 rounds each: about 30 s a run on an idle 2-core machine.

The runs pin torch's CPU kernels to AVX2 (`powertrip.core.kernels`, the default of every
run), so the hashes are the same on any x86-64 CPU with AVX2, Intel or AMD, with or without
AVX-512; with POWERTRIP_CPU_KERNELS=native they are this CPU's own and will not match.

    python tests/golden/golden.py            # check (exit 1 and a list on any difference)
    python tests/golden/golden.py --record   # write expected.json
    python tests/golden/golden.py --only powertrip-paper --keep /tmp/golden
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))  # `powertrip` from this checkout, from any cwd
from powertrip.core.kernels import PINNED  # noqa: E402

EXPECTED = HERE / "expected.json"
COMPARED_FILES = ("rounds.csv", "decisions.jsonl")
BASE_ARGS = ("--workload", "femnist", "--sites", "10", "--max-rounds", "4", "--seed", "3")

# name -> extra `powertrip run` arguments (after BASE_ARGS; later flags win)
RUNS: dict[str, tuple[str, ...]] = {
    "powertrip-paper": ("--policy", "powertrip"),
    "highest-power-data-parallel": (
        "--policy",
        "highest-power",
        "--set",
        "work_model=data-parallel",
    ),
    "adaptive": ("--policy", "adaptive"),
    "static-k3": ("--policy", "static", "--param", "k=3"),
    # the paper's method, as configs/reproduce.yaml runs it (the others run the defaults)
    "static-k3-fedavg-fp32": (
        "--policy",
        "static",
        "--param",
        "k=3",
        "--set",
        "outer_optimizer=fedavg",
        "--set",
        "delta_encoding=fp32",
    ),
    "oort-trace": ("--policy", "oort", "--power", "trace"),
    "powertrip-power-split": ("--policy", "powertrip", "--set", "work_model=power-split"),
    "random-fig5-2gb": (
        "--policy",
        "random",
        "--set",
        "link_model=fig5",
        "--update-size-gb",
        "2",
        "--seed",
        "5",
    ),
    "shakespeare-static": (
        "--workload",
        "shakespeare",
        "--policy",
        "static",
        "--param",
        "k=2",
        "--max-rounds",
        "3",
    ),
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_one(name: str, out_root: Path) -> dict[str, str]:
    """Make one golden run under ``out_root/name`` and return its files' digests."""
    out = out_root / name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "powertrip",
        "run",
        *BASE_ARGS,
        *RUNS[name],
        "--out",
        str(out),
        "--quiet",
    ]
    # the pinned kernels whatever this shell says: the hashes are recorded under them
    env = {**os.environ, "POWERTRIP_CPU_KERNELS": "pinned", **PINNED}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"golden run {name} failed (exit {done.returncode}):\n{tail}")
    return {f: _digest(out / f) for f in COMPARED_FILES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record", action="store_true", help="write expected.json instead of checking"
    )
    parser.add_argument(
        "--only", default="", help=f"comma list of runs (default all: {', '.join(RUNS)})"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="make the runs here and keep them (default: a temporary directory)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"--only: unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    if args.record and len(names) != len(RUNS):
        parser.error("--record makes every run; drop --only")
    out_root = args.keep or Path(tempfile.mkdtemp(prefix="powertrip-golden-"))
    out_root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = dict(zip(names, pool.map(lambda n: run_one(n, out_root), names), strict=True))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        if args.keep is None:
            shutil.rmtree(out_root, ignore_errors=True)
    elapsed = time.monotonic() - started
    if args.record:
        EXPECTED.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        where = EXPECTED.relative_to(REPO)
        print(f"golden: recorded {len(results)} runs in {elapsed:.0f} s -> {where}")
        return 0
    expected = json.loads(EXPECTED.read_text())
    differ = [
        f"{name}/{f}"
        for name, digests in results.items()
        for f, d in digests.items()
        if expected.get(name, {}).get(f) != d
    ]
    if differ:
        listing = "\n  ".join(differ)
        print(f"golden: these outputs differ from expected.json:\n  {listing}", file=sys.stderr)
        print("(rerun one with --only NAME --keep DIR to look at it)", file=sys.stderr)
        return 1
    files = len(results) * len(COMPARED_FILES)
    print(f"golden: {len(results)} runs byte-identical ({files} files) in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
