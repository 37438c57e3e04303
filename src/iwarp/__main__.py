"""``python -m iwarp``: the same as the ``iwarp`` command."""

import sys

from iwarp.cli import main

sys.exit(main())
