"""``python -m iwarp``: the same as the ``iwarp`` command."""

import sys

try:
    from iwarp.cli import main
except KeyboardInterrupt:  # Ctrl-C during start-up: quietly, as main() would
    sys.exit(130)

sys.exit(main())
