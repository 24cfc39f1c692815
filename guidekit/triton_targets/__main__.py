"""``python -m guidekit.triton_targets``: see the package's docstring."""

import sys

from . import main

sys.exit(main())
