"""A process that leaves its parent's session, as a Ray worker does (the raylet and its
workers call setsid), and keeps running and writing until signalled.

    python ray_like.py PIDFILE BEAT [--spawn]

Appends its pid to PIDFILE, then a line to BEAT every 50 ms. With --spawn it first starts
one more of itself in yet another new session (os.setsid), a Ray worker under the raylet.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main() -> int:
    pidfile, beat = sys.argv[1], sys.argv[2]
    os.setsid()  # its own session and process group: a group signal to CMD misses it
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    if "--spawn" in sys.argv[3:]:
        subprocess.Popen([sys.executable, __file__, pidfile, beat])
    for _ in range(2400):  # bounded: two minutes, far past any test's end
        with open(beat, "a") as fh:
            fh.write(f"{os.getpid()} {time.time()}\n")
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
