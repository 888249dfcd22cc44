"""``python -m aiperf_sdk``: the ``aiperf-sdk`` command line."""

import sys

from .cli import main

sys.exit(main())
