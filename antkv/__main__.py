"""``python -m antkv``: the ``antkv`` command line (see :mod:`antkv.cli`)."""

import sys

from .cli import main

sys.exit(main())
