"""``python -m autoresearch``: the same CLI as the ``autoresearch`` console script (launchers use this)."""

import sys

from autoresearch.cli import main

sys.exit(main())
