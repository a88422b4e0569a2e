"""An op file that calls sys.exit(5) at import."""

import sys

sys.exit(5)
