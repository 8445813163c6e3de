"""`python -m spanlift.cli …`, the same as `spanlift …`."""

import sys

from spanlift.cli import main

sys.exit(main())
