"""Stamps or checks the records' source hashes: ``python -m guidekit.recorded.stamp``,
run by path (``python tools/stamp_records.py --check``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from guidekit.recorded.stamp import main  # noqa: E402

sys.exit(main())
