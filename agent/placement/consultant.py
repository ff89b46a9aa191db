"""The consultant-backed Placement (seed 002): one consultant (or its replicas over one
database) owns membership, leases, the epoch and every host's preference list; the agent asks it
through the consultant's client module, which implements the port as it stands."""

from __future__ import annotations

from agent.placement.port import Placement
from agent.settings import AgentSettings, consultant_addresses
from consultant.client import ConsultantClient


def consultant_placement(settings: AgentSettings) -> Placement:
    """The consultant at `settings.consultant` (or its replicas, `consultants`: calls fail over
    between them), over mutual TLS when `settings.tls` says so."""
    return ConsultantClient(consultant_addresses(settings), tls=settings.tls)
