#!/usr/bin/env python3
"""Entry point of tc/shape, tc/clear and tc/show, and of ``tc/shaping.py has-netem``.

The code is the package ``powertrip.linkshaping`` (standard library + iproute2 only).
This launcher exists so the scripts run *this checkout's* copy of it with any python3,
installed or not (a site container has /app/tc and /app/powertrip side by side): it puts
the repository root first on sys.path.  Nothing imports this file; use
``from powertrip import linkshaping`` instead.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from powertrip.linkshaping.cli import main

    sys.exit(main())
