"""``python -m guidekit.benchmark``: see :func:`guidekit.benchmark.cli.main`."""

import sys

from .cli import main

sys.exit(main())
