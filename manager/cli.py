"""`manager`: seeds, status and operator commands (issue #6, not built yet)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("manager: not built yet (issue #6: seed, status, drain, wait, report). Nothing was done.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
