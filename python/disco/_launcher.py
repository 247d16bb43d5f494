"""Where launch/disco-run is: the one place that knows how to start a job (python3 -m disco and
disco.ProcessSession run it). It ships inside this package; a checkout's launch/ holds the same
script."""

import os


def path():
    here = os.path.dirname(os.path.abspath(__file__))
    p = os.path.join(here, "disco-run")
    if not os.access(p, os.X_OK):
        raise RuntimeError(
            "disco: the launcher %s is missing or not executable (the package is incomplete: "
            "reinstall it, or rebuild the checkout)" % p)
    return p
