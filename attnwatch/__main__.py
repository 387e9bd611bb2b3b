"""`python -m attnwatch …`: the command line (attnwatch.cli.main)."""

import sys

from attnwatch.cli.main import main

sys.exit(main())
