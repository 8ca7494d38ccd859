"""How a `powertrip` command ends: its exit code, and, when SIGINT or SIGTERM stops it, one
line that says what was stopped and how to go on instead of a traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from powertrip.core import runfiles

#: exit codes of run, compare, sweep and reproduce: 0 done; 1 a run failed (its summary says
#: why); 2 bad usage or configuration, found before anything starts; 3 a service or site
#: worker exited before the run was over (the message names it and shows its log's last
#: lines); 128 + the signal when SIGINT (130) or SIGTERM (143) stopped it
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_CHILD = 3


def interrupted(prog: str, exc: KeyboardInterrupt, hint: str) -> int:
    """SIGTERM or SIGINT (Ctrl-C): stop whatever service is left, say what was stopped and
    how to go on, exit 128 + the signal (130 for SIGINT, 143 for SIGTERM)."""
    import signal

    from powertrip.app.experiments.launcher import Interrupted, stop_all

    stopped = list(exc.stopped) if isinstance(exc, Interrupted) else []
    stopped += [name for name in stop_all() if name not in stopped]
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    what = ""
    if stopped:
        what = f": stopped {len(stopped)} service{'' if len(stopped) == 1 else 's'}"
        what += f" ({', '.join(stopped)})"
    print(
        f"{prog}: interrupted by {signal.Signals(signum).name}{what}"
        + (f"; {hint}" if hint else ""),
        file=sys.stderr,
    )
    return 128 + signum


def resume_hint(args: argparse.Namespace) -> str:
    """How to pick up what a signal interrupted (commands.run records its --out)."""
    if args.command in ("compare", "sweep") and getattr(args, "ray", None):
        return (
            "the Ray tasks were cancelled; run the same command again to continue: finished "
            "runs are reused and the others made again"
        )
    if args.command in ("compare", "sweep"):
        return (
            "run the same command again to continue: finished runs are reused and the "
            "interrupted one resumed from its checkpoint"
        )
    if args.command == "reproduce":
        return "run the same command again to continue: finished runs are kept"
    out = Path(args.out) if getattr(args, "out", None) else None
    if out is None or not (out / runfiles.REQUESTED_CONFIG).is_file():
        return ""
    if (out / runfiles.CHECKPOINT_DIR).is_dir():
        return f"the run can be resumed with powertrip run --resume {out}"
    return f"no checkpoint was written yet in {out}: run it again to start over"
