#!/usr/bin/env python3
"""The delay relay on its own (see tc/README.md): ``tc/delay_relay.py --listen ... --target ...``.

The relay is ``powertrip/linkshaping/delay_relay.py`` (standard library only); this
launcher runs this checkout's copy of it without an install, as tc/shaping.py does.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from powertrip.linkshaping.delay_relay import main

    sys.exit(main())
