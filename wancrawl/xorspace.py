"""The XOR key space of seeds 000 and 001 (Kademlia): 160-bit ids, the host key, node ids bound
to certificates, and the ranges of keys that move when a node joins.

One module at the bottom floor so that every user computes the same thing: the consultant's XOR
partitioner (consultant/partition/xor.py), the agent's Kademlia overlay (agent/placement/kademlia/)
and the agent's state indexed by key (agent/state/: seed 000's firstdiff).

Ids are bound to certificates (S/Kademlia's idea, docs/kademlia.md): a node's id is the SHA-1 of
its certificate's SubjectPublicKeyInfo, so nobody picks an id next to a victim's hosts; the CA
also writes it into the certificate as the DNS name `ID_HEX.node.wancrawl`, which a peer dialing
that node asks TLS to verify (a contact whose address does not answer with that id's
certificate never enters a routing table).
"""

from __future__ import annotations

import hashlib

ID_BITS = 160
ID_BYTES = ID_BITS // 8
MAX_ID = (1 << ID_BITS) - 1
ID_SAN_SUFFIX = ".node.wancrawl"


def host_key(host: str) -> int:
    """The key of a host (the unit of placement: politeness is per host). The same function in
    both modes, so a host's XOR neighbourhood is the same with or without a consultant."""
    return int.from_bytes(hashlib.sha1(b"host:" + host.encode()).digest(), "big")


def node_id_of_spki(spki_der: bytes) -> int:
    """A node id from a public key (DER SubjectPublicKeyInfo)."""
    return int.from_bytes(hashlib.sha1(spki_der).digest(), "big")


def node_id_of_cert(cert_pem: bytes) -> int:
    """The node id a PEM certificate gives its holder: the hash of its public key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return node_id_of_spki(spki)


def insecure_node_id(agent_id: str) -> int:
    """Without TLS (tests, WANCRAWL_INSECURE) there is no certificate to bind an id to: the id is
    the hash of the agent id, and nothing checks it. docs/security.md says what that gives up."""
    return int.from_bytes(hashlib.sha1(b"agent:" + agent_id.encode()).digest(), "big")


def id_hex(node_id: int) -> str:
    return f"{node_id:040x}"


def id_bytes(node_id: int) -> bytes:
    return node_id.to_bytes(ID_BYTES, "big")


def id_from_bytes(data: bytes) -> int:
    """A 20-byte id; ValueError for any other length."""
    if len(data) != ID_BYTES:
        raise ValueError(f"a node id is {ID_BYTES} bytes, got {len(data)}")
    return int.from_bytes(data, "big")


def id_san(node_id: int) -> str:
    """The DNS name the CA writes into a certificate for the id its key gives (and a peer dialing
    the node verifies with TLS)."""
    return id_hex(node_id) + ID_SAN_SUFFIX


def distance(a: int, b: int) -> int:
    return a ^ b


def firstdiff(a: int, b: int) -> int:
    """Seed 000's firstdiff: the index (159 = most significant) of the highest bit where a and b
    differ; -1 when they are equal. Keys closer to b than to a are exactly those whose bit
    firstdiff(a, b) equals b's."""
    return (a ^ b).bit_length() - 1
