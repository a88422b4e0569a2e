"""A solution whose import never ends."""

import time

time.sleep(600)
