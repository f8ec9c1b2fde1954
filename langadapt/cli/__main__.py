"""`python -m langadapt.cli`: the `langadapt` command."""

import sys

from langadapt.cli import main

sys.exit(main())
