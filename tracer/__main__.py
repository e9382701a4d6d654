"""`python -m tracer`: the `gatetrace` command."""

import sys

from tracer.cli import main

sys.exit(main())
