"""Node ids bound to certificates (S/Kademlia's idea; wancrawl/kademlia/xorspace.py): this agent's own id,
and the id a caller's certificate gives it, which its claimed contact must carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.settings import AgentSettings
from wancrawl import grpcutil
from wancrawl.kademlia import xorspace


def node_id_for(settings: AgentSettings) -> int:
    """This agent's id: the hash of its certificate's public key; without TLS, of its agent id."""
    tls = grpcutil.effective_tls(settings.tls)
    if tls.insecure:
        return xorspace.insecure_node_id(settings.agent_id)
    return xorspace.node_id_of_cert(Path(tls.cert).read_bytes())


def caller_node_id(context: Any, agent_id: str) -> int:
    """The id the caller of an RPC may use: its verified client certificate's key's hash; over
    plaintext (no certificate to bind to) the hash of the agent id it names."""
    pem = (context.auth_context() or {}).get("x509_pem_cert")
    if pem:
        return xorspace.node_id_of_cert(pem[0])
    return xorspace.insecure_node_id(agent_id)
