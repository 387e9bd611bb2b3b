"""`python -m attnwatch …`: the command line (attnwatch.ci.cli)."""

import sys

from attnwatch.ci.cli import main

sys.exit(main())
