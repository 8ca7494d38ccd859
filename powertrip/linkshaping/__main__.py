"""``python -m powertrip.linkshaping {shape,clear,show,has-netem} ...``: as the tc/ scripts."""

import sys

from .cli import main

sys.exit(main())
