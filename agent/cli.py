"""`agent`: the crawler agent's command line (issue #4, not built yet)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("agent: not built yet (issue #4: polite fetching, frontier, routing). Nothing was started.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
