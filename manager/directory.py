"""Where the manager learns the agents and the hosts' owners: the consultant (ConsultantClient)
or, with `--peers` (a cluster in `mode = "kademlia"`, no consultant), the agents' overlay
(manager/peers.py PeerDirectory). Both answer the same two questions, typed here."""

from __future__ import annotations

import argparse
from typing import Protocol

from consultant.client import ConsultantClient, HostRoute
from manager.peers import PeerDirectory
from wancrawl.v1 import consultant_pb2


class Directory(Protocol):
    """What manager/seed.py and manager/status.py ask: the live agents, and hosts' preference lists."""

    async def list_agents(self, include_dead: bool = False) -> consultant_pb2.ListAgentsResponse: ...

    async def resolve(self, hosts: list[str]) -> list[HostRoute]: ...


def peer_addresses(value: str | None) -> list[str]:
    """--peers ADDR[,ADDR...] (or WANCRAWL_PEERS) as a list; [] when not given."""
    return [a.strip() for a in (value or "").split(",") if a.strip()]


def open_directory(args: argparse.Namespace) -> ConsultantClient | PeerDirectory:
    """PeerDirectory over --peers when given, else the consultant at --consultant (an async context manager)."""
    peers = peer_addresses(getattr(args, "peers", ""))
    if peers:
        return PeerDirectory(peers)
    return ConsultantClient(args.consultant)
