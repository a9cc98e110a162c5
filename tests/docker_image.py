"""The Docker backend's broker image for tests: built from Debian's packages when missing.

Nothing is pulled: scripts/build-docker-image.sh debootstraps a tree and imports it (a few
minutes the first time; a no-op once the image is present). Needs a running daemon.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build-docker-image.sh"


def ensure_image() -> None:
    """Builds the default image unless it is present. Fails the test when the build fails."""
    build = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
