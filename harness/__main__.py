"""Entry point of `python -m harness`."""

import signal
import sys

from harness.cli import main

# SIGINT stops a run (it heals, tears down and keeps what it has) however the harness was started:
# a shell starts a background job (`cmd &`) with SIGINT ignored, and Python keeps it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(main())
