"""A solution or submission that ends the process at import with exit code 0."""

import os

os._exit(0)
