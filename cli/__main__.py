"""``python -m cli``: the ``recipe`` command (``cli.main``)."""

import sys

from cli.main import main

sys.exit(main())
