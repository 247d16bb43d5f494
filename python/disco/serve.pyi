# Type stubs of disco.serve (python/disco/serve.py): `python3 -m disco.serve`.

from typing import Sequence

def run(argv: Sequence[str] | None = None) -> int: ...
