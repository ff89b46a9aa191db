"""`python -m wancrawl.health HOST:PORT`: exit 0 when the gRPC server there reports SERVING, 1 otherwise.

The compose health checks of the consultant and storage (docker-compose.yml). A module with plain
arguments rather than `python -c "<code>"`: podman's Docker-compatible API (4.3, Debian bookworm)
splits a health check's arguments at spaces, so code in one argument arrived as `import` alone
(issue 35, seen running the compose file for real). Mutual TLS from WANCRAWL_TLS_* as every client.
"""

from __future__ import annotations

import asyncio
import sys

from wancrawl.grpcutil import check_health


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m wancrawl.health HOST:PORT", file=sys.stderr)
        return 2
    return 0 if asyncio.run(check_health(args[0])) else 1


if __name__ == "__main__":
    sys.exit(main())
