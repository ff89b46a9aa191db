"""python scripts/metrics_doc.py docs/metrics.md [--check]: regenerate (or check) the metric tables
from each service's schema. A script above the services, not part of wancrawl/: the shared package
sits below agent, consultant and storage and must not import them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.metrics import SCHEMA as AGENT  # noqa: E402
from consultant.metrics import SCHEMA as CONSULTANT  # noqa: E402
from storage.metrics import SCHEMA as STORAGE  # noqa: E402
from wancrawl.metrics import Schema, render  # noqa: E402

SCHEMAS: dict[str, Schema] = {"agent": AGENT, "consultant": CONSULTANT, "storage": STORAGE}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    if len(paths) != 1:
        print("usage: python scripts/metrics_doc.py docs/metrics.md [--check]", file=sys.stderr)
        return 2
    path = Path(paths[0])
    old = path.read_text(encoding="utf-8")
    new = render(old, SCHEMAS)
    if check:
        if new != old:
            print(f"{path} is stale: run python scripts/metrics_doc.py {path}", file=sys.stderr)
            return 1
        return 0
    if new != old:
        path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
