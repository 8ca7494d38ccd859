"""One site table per seed folder of a reproduction, not one per run.

Every run of a set-up and seed draws the same sites (the population is a function of the
seed and the set-up), and each run's summary.json repeats them: about 14 KB a run, most of
results/. `share_site_tables` keeps the table once, in the seed folder's `sites.json`, and
takes it out of each summary.json that holds exactly that table; a run whose table differs
keeps its own. The report reads the shared table back where a summary has none
(powertrip/app/report/rundir.py), so what a report shows is unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from powertrip.core import runfiles


def share_site_tables(seed_dir: Path) -> int:
    """Share the site table of `seed_dir`'s runs; the bytes it saved (0 when nothing to do).

    The table shared is the one in `sites.json` if it exists, else the one most runs hold."""
    seed_dir = Path(seed_dir)
    shared_path = seed_dir / runfiles.SHARED_SITES
    runs = []
    for summary_path in sorted(seed_dir.glob(f"*/{runfiles.SUMMARY}")):
        text = summary_path.read_text()
        summary = json.loads(text)
        if summary.get("sites"):
            runs.append((summary_path, text, summary))
    saved = 0
    if shared_path.is_file():
        shared = json.loads(shared_path.read_text())
    elif runs:
        tables = Counter(json.dumps(summary["sites"]) for _, _, summary in runs)
        shared = json.loads(tables.most_common(1)[0][0])
        shared_path.write_text(json.dumps(shared) + "\n")
        saved = -shared_path.stat().st_size
    for summary_path, text, summary in runs:
        if summary["sites"] != shared:
            continue
        del summary["sites"]
        new = json.dumps(summary, indent=2, sort_keys=False) + "\n"
        tmp = summary_path.with_name(summary_path.name + ".tmp")
        tmp.write_text(new)
        tmp.replace(summary_path)
        saved += len(text) - len(new)
    return saved


def share_all(runs_dir: Path) -> int:
    """`share_site_tables` for every `<set-up>/seed<N>` folder under `runs_dir`."""
    return sum(share_site_tables(d) for d in sorted(Path(runs_dir).glob("*/seed*")) if d.is_dir())
