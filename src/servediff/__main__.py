"""``python -m servediff`` is the ``servediff`` command."""

import sys

from servediff.cli import main

sys.exit(main())
