"""A lying agent, for the tests and the fault harness (issue 36): its overlay answers FindNode
with itself alone ("self") or with ten made-up contacts next to each target ("fabricate"), and
Members with itself alone. It still crawls and pings honestly, so the other agents' tables are
complete; what it fools, if anything, is whoever starts a lookup at it: storage's placement
check and the manager (agent/peers.py). Never part of an agent: the lab runs it as

    python -m lab.liar self|fabricate --config agent.toml    # `agent.cli run` with the lie

and the tests call `lie(overlay, how)` on an in-process agent."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from agent.placement.kademlia.overlay import Overlay
from wancrawl.kademlia.table import Contact

HOWS = ("self", "fabricate")


def answers(me: Contact, targets: Iterable[int], count: int, how: str) -> list[list[Contact]]:
    """The lie for each target: this node alone, or ten contacts next to the target that claim
    this node's address (no node answers there as them)."""
    if how == "self":
        return [[me] for _ in targets]
    return [[Contact(t ^ (j + 1), f"{me.agent_id}-fake{j}", me.address) for j in range(min(10, count))] for t in targets]


def lie(overlay: Overlay, how: str) -> None:
    """Make this overlay lie from now on (its own lookups and table stay honest)."""
    if how not in HOWS:
        raise ValueError(f"how: one of {HOWS}")
    me = overlay.me
    overlay.find = lambda targets, count: answers(me, targets, count, how)  # type: ignore[method-assign]
    overlay.members = lambda: [me]  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in HOWS:
        print(f"usage: python -m lab.liar {{{'|'.join(HOWS)}}} --config AGENT.toml", file=sys.stderr)
        return 2
    how = args.pop(0)
    if args[:1] != ["run"]:
        args.insert(0, "run")
    init = Overlay.__init__

    def lying_init(self: Overlay, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        init(self, *a, **kw)
        lie(self, how)

    Overlay.__init__ = lying_init  # type: ignore[method-assign]
    from agent.cli import main as agent_main
    return agent_main(args)


if __name__ == "__main__":
    sys.exit(main())
