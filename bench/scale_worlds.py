"""Generate (or find) the analyst histories bench/scale.py measures, kept for later runs:

    GEO_SCALE_KEEP_WORLDS=1 python bench/scale_worlds.py 100000 1000000 10000000

Each size lives in its own database (bench/_scale_analysis.py: WORLD_PREFIX + size); a complete
one is reused. Drop them with ``--drop``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("GEO_SCALE_KEEP_WORLDS", "1")

import _scale_analysis as sa
import psycopg


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):  # nothing to build: say what it takes
        print(__doc__)
        return
    if args[:1] == ["--drop"]:
        with psycopg.connect(sa.ADMIN_URL, autocommit=True) as a:
            for size in args[1:]:
                a.execute(f'DROP DATABASE IF EXISTS "{sa.WORLD_PREFIX}{int(size)}" WITH (FORCE)')  # type: ignore[arg-type]
        return
    for size in args:
        _conn, history = sa._history(int(size))
        print(f"{int(size):,}: {history}", flush=True)


if __name__ == "__main__":
    main()
