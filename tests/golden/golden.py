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
10 sites, 3-4 rounds each: about 20 s a run on an idle 2-core machine.

One record per CPU kernel family. The runs pin torch's CPU kernels (`powertrip.core.kernels`),
whose bits hold at any thread count, but MKL computes other bits on an AMD CPU than on an
Intel one (its reproducible branches are Intel's), so ``expected.json`` keeps the hashes of
each kernel family recorded so far (`powertrip kernels` names this machine's). On a family
with a record the check is byte for byte. On one without, the runs whose decisions do not
read the model's accuracy (``STATIC``) are held to ``reference/`` (the reference family's
files): every column equal but the accuracy and losses, which must lie within ``ACCURACY_TOL``
and ``LOSS_TOL``; ``--record`` then adds the family.

``--cores N`` makes the runs with the thread settings of an N-core machine (every process
sees ``os.cpu_count() == N`` and N OpenMP threads), so the same record must hold at 2 and 16.

    python tests/golden/golden.py                 # check (exit 1 and a list on any difference)
    python tests/golden/golden.py --cores 16      # the same, as a 16-core machine runs them
    python tests/golden/golden.py --record        # add or replace this family's hashes
    python tests/golden/golden.py --only powertrip-paper --keep /tmp/golden
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))  # `powertrip` from this checkout, from any cwd
from powertrip.core.kernels import ENV as KERNELS_ENV  # noqa: E402
from powertrip.core.kernels import PINNED  # noqa: E402

EXPECTED = HERE / "expected.json"
#: the reference family's files, the yardstick for a family with no record of its own
REFERENCE = HERE / "reference"
COMPARED_FILES = ("rounds.csv", "decisions.jsonl")
#: runs whose sites do not depend on the model's accuracy or loss (static k, random): across
#: kernel families their rounds.csv must agree in every column but these
STATIC = ("static-k3", "static-k3-fedavg-fp32", "random-fig5-2gb", "shakespeare-static")
KERNEL_COLUMNS = ("accuracy", "loss", "train_loss")
#: how far another kernel family may move them in these 3-4 rounds: ten times the largest
#: drift measured between two families (an Intel Xeon's pinned and native kernels, 2026-12-07:
#: accuracy 0.0005, one sample in 2,000; loss 0.0006, 0.015 %), rounded up
ACCURACY_TOL = 0.005
LOSS_TOL = 0.005
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


def cores_env(cores: int | None, scratch: Path) -> dict[str, str]:
    """The environment of a process tree that runs as on a `cores`-core machine: a
    sitecustomize on PYTHONPATH makes os.cpu_count() say so (the services size their threads
    by it), and OpenMP's default follows."""
    if not cores:
        return {}
    patch = scratch / f"cores-{cores}"
    patch.mkdir(parents=True, exist_ok=True)
    (patch / "sitecustomize.py").write_text(
        textwrap.dedent(f"""\
            import os
            os.cpu_count = lambda: {cores}
        """)
    )
    paths = [str(patch), os.environ.get("PYTHONPATH", "")]
    return {
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "OMP_NUM_THREADS": str(cores),
        "MKL_NUM_THREADS": str(cores),
    }


def kernels_env(mode: str) -> dict[str, str]:
    """The kernels the runs use: pinned whatever this shell says (the records are made under
    them), or the CPU's own with --kernels native (a family of its own)."""
    if mode == "native":
        return {KERNELS_ENV: "native"}
    return {KERNELS_ENV: "pinned", **PINNED}


def this_family(env: dict[str, str]) -> tuple[str, str]:
    """(name, cpu) of the kernel family the runs' processes compute, from a child process with
    their environment: `powertrip kernels` names a recorded one, else its digest."""
    code = (
        "import json\n"
        "from powertrip.core.kernels import configure_torch, cpu_identity, pin_cpu_kernels\n"
        "pin_cpu_kernels(); configure_torch()\n"
        "from powertrip.core import kernelcheck as K\n"
        "single = K.fingerprints((1,))[1]\n"
        "print(json.dumps([K.family_name(single, K.load_families()), cpu_identity()['model']]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, **env},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    name, cpu = json.loads(done.stdout.strip().splitlines()[-1])
    return name, cpu


def run_one(name: str, out_root: Path, env: dict[str, str]) -> dict[str, str]:
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
    done = subprocess.run(
        cmd, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"golden run {name} failed (exit {done.returncode}):\n{tail}")
    return {f: _digest(out / f) for f in COMPARED_FILES}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def within_tolerance(name: str, made: Path, reference: Path) -> list[str]:
    """How one STATIC run of another kernel family departs from the reference family's: every
    column equal but KERNEL_COLUMNS, and those within the tolerances."""
    ours, theirs = _rows(made / "rounds.csv"), _rows(reference / "rounds.csv")
    if len(ours) != len(theirs):
        return [f"{name}: {len(ours)} rounds, the reference has {len(theirs)}"]
    problems = []
    for a, b in zip(ours, theirs, strict=True):
        for column, value in b.items():
            mine = a.get(column)
            if column in KERNEL_COLUMNS:
                tol = ACCURACY_TOL if column == "accuracy" else LOSS_TOL * abs(float(value))
                if abs(float(mine) - float(value)) > tol:
                    problems.append(
                        f"{name} round {b['round']}: {column} {mine} against the reference's "
                        f"{value} (tolerance {tol:.4g})"
                    )
            elif mine != value:
                problems.append(f"{name} round {b['round']}: {column} {mine} != {value}")
    return problems


def drift(names: list[str], out_root: Path) -> dict[str, float]:
    """The largest departure of each KERNEL_COLUMN from the reference over `names`."""
    worst = dict.fromkeys(KERNEL_COLUMNS, 0.0)
    for name in names:
        for a, b in zip(
            _rows(out_root / name / "rounds.csv"),
            _rows(REFERENCE / name / "rounds.csv"),
            strict=False,
        ):
            for column in KERNEL_COLUMNS:
                worst[column] = max(worst[column], abs(float(a[column]) - float(b[column])))
    return worst


def record(results: dict, family: str, cpu: str, out_root: Path, expected: dict) -> dict:
    """The new expected.json: this family's hashes added or replaced. Recorded on the reference
    family (or when there is none), the reference files are rewritten too and the other
    families' hashes dropped: a change meant to move results moves theirs, and they must be
    recorded again on such a CPU (the tolerance check holds meanwhile)."""
    reference_family = expected.get("reference_family")
    if reference_family in (None, family):
        shutil.rmtree(REFERENCE, ignore_errors=True)
        for name in results:
            (REFERENCE / name).mkdir(parents=True)
            for f in COMPARED_FILES:
                shutil.copy2(out_root / name / f, REFERENCE / name / f)
        expected = {"reference_family": family, "families": {}}
    expected["families"][family] = {"cpu": cpu, "runs": results}
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record", action="store_true", help="add or replace this kernel family's record"
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
    parser.add_argument(
        "--cores", type=int, default=0,
        help="run with the thread settings of a machine with this many cores (default: this one's)",
    )  # fmt: skip
    parser.add_argument(
        "--kernels", choices=("pinned", "native"), default="pinned",
        help="pinned (the records') or native (this CPU's own: a family without a record)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"--only: unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    if args.record and len(names) != len(RUNS):
        parser.error("--record makes every run; drop --only")
    if args.cores < 0:
        parser.error("--cores must be 1 or more")
    out_root = args.keep or Path(tempfile.mkdtemp(prefix="powertrip-golden-"))
    out_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="powertrip-golden-env-"))
    env = {**kernels_env(args.kernels), **cores_env(args.cores, scratch)}
    family, cpu = this_family(env)
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            made = pool.map(lambda n: run_one(n, out_root, env), names)
            results = dict(zip(names, made, strict=True))
        elapsed = time.monotonic() - started
        cores = f"{args.cores}-core thread settings" if args.cores else "this machine's threads"
        print(f"golden: kernel family {family} ({cpu}), {cores}, {args.kernels} kernels")
        if args.record:
            EXPECTED.write_text(
                json.dumps(
                    record(results, family, cpu, out_root, expected), indent=2, sort_keys=True
                )
                + "\n"
            )
            print(f"golden: recorded {len(results)} runs in {elapsed:.0f} s for family {family}")
            return 0
        return check(results, names, family, expected, out_root, elapsed)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if args.keep is None:
            shutil.rmtree(out_root, ignore_errors=True)


def check(
    results: dict, names: list[str], family: str, expected: dict, out_root: Path, elapsed: float
) -> int:
    """Byte for byte against this family's record, else STATIC to the reference's tolerance."""
    record_of = expected.get("families", {}).get(family)
    if record_of is not None:
        differ = [
            f"{name}/{f}"
            for name, digests in results.items()
            for f, d in digests.items()
            if record_of["runs"].get(name, {}).get(f) != d
        ]
        if differ:
            listing = "\n  ".join(differ)
            print(f"golden: these outputs differ from expected.json:\n  {listing}", file=sys.stderr)
            hint = "rerun one with --only NAME --keep DIR; diff it with tests/golden/reference/NAME"
            print(f"({hint})", file=sys.stderr)
            return 1
        files = len(results) * len(COMPARED_FILES)
        print(f"golden: {len(results)} runs byte-identical ({files} files) in {elapsed:.0f} s")
        return 0
    compared = [n for n in names if n in STATIC]
    print(
        f"golden: no record for kernel family {family} (recorded: "
        f"{', '.join(expected.get('families', {})) or 'none'}); holding {', '.join(compared)} "
        f"to the reference family {expected.get('reference_family')} within accuracy "
        f"{ACCURACY_TOL} and loss {LOSS_TOL:.1%}"
    )
    problems = [p for n in compared for p in within_tolerance(n, out_root / n, REFERENCE / n)]
    if problems:
        print("golden: outside the tolerance:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    worst = ", ".join(f"{c} {v:.4g}" for c, v in drift(compared, out_root).items())
    print(
        f"golden: {len(compared)} runs within tolerance (largest drift: {worst}) in "
        f"{elapsed:.0f} s; `--record` adds this family"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
