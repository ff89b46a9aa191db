"""The manager's view of a cluster without a consultant: the overlay's query client
(agent/peers.py PeerDirectory), shared with storage."""

from __future__ import annotations

from agent.peers import PeerDirectory, contact_of, keyed, listing, routes

__all__ = ["PeerDirectory", "contact_of", "keyed", "listing", "routes"]
