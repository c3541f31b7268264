"""``python -m antkv``: the ``antkv`` command line (see :mod:`antkv.tools.cli`)."""

import sys

from .tools.cli import main

sys.exit(main())
