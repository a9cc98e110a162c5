"""`python -m clusters.lazyfs --backing DIR --mountpoint DIR --control SOCK`: the layer's daemon
(`clusters.lazyfs.daemon`)."""

import sys

from clusters.lazyfs.daemon import main

sys.exit(main(sys.argv[1:]))
