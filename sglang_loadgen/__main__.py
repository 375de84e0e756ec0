"""``python -m loadgen``: the load generator as the GPU host runs it (see ``client.main``)."""

import sys

from .client import main

sys.exit(main())
