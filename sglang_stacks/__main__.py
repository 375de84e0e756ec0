"""`python -m sglang_stacks <command>`: the companion CLI."""

import sys

from sglang_stacks.cli import main

sys.exit(main())
