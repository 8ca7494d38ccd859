"""``python -m powertrip``: the same command line as the ``powertrip`` script."""

import sys

from powertrip.app.cli import main

sys.exit(main())
