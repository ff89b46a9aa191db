"""The XOR key space of seeds 000 and 001 (Kademlia): 160-bit ids, the host key, node ids bound
to certificates, and the ranges of keys that move when a node joins.

One module at the bottom floor so that every user computes the same thing: the consultant's XOR
partitioner (consultant/partition/xor.py), the agent's Kademlia overlay (agent/placement/kademlia/)
and its query client (agent/peers.py), the certificates' id names (wancrawl/pki.py) and the
agent's state indexed by key (agent/state/: seed 000's firstdiff).

Ids are bound to certificates (S/Kademlia's idea, docs/kademlia.md): a node's id is the SHA-1 of
its certificate's SubjectPublicKeyInfo, so nobody picks an id next to a victim's hosts; the CA
also writes it into the certificate as the DNS name `ID_HEX.node.wancrawl`, which a peer dialing
that node asks TLS to verify (a contact whose address does not answer with that id's
certificate never enters a routing table).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

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


# -- seed 000's firstdiff: which keys move when a node joins, read through a prefix index ----------
#
# The agent's state (agent/state/frontier.py, agent/state/seen.py) indexes each host by a 64-bit
# prefix of its key rather than by its firstdiff to the node's own id (the seed's Map<firstdiff,
# history>): the prefix does not depend on who asks, so one index answers for any (me, newcomer),
# for a join next to this node as for a neighbour's leave, and survives a change of this node's id.
# Keys closer to newcomer than to me are those whose bit firstdiff(me, newcomer) is newcomer's; in
# key order they form blocks of 2^d keys, every other block, which a skip-scan reads block by block.

KEY_PREFIX_BITS = 64
KEY_PREFIX_SHIFT = ID_BITS - KEY_PREFIX_BITS  # 96: the key bits the prefix leaves out
# SQLite's INTEGER is signed 64-bit: the unsigned prefix is stored minus 2^63 (its top bit flipped),
# which keeps the order, so a range of prefixes is a range of the column.
KEY_PREFIX_OFFSET = 1 << (KEY_PREFIX_BITS - 1)


def key_prefix(key: int) -> int:
    """The stored index value of a key: its top 64 bits as a signed 64-bit int, order-preserving."""
    return (key >> KEY_PREFIX_SHIFT) - KEY_PREFIX_OFFSET


def host_prefix(host: str) -> int:
    """key_prefix(host_key(host)): what the agent's state stores per host."""
    return key_prefix(host_key(host))


def moves_to(key: int, me: int, newcomer: int) -> bool:
    """Is key strictly closer (XOR) to newcomer than to me? (The exact test; never true if me == newcomer.)"""
    return key ^ newcomer < key ^ me


def moving_range_after(me: int, newcomer: int, x: int, *, shift: int = 0, bits: int = ID_BITS) -> tuple[int, int] | None:
    """The first range [lo, hi] of index values v >= x (v = key >> shift, unsigned, of bits - shift
    bits) that can hold keys closer to newcomer than to me, with lo >= x; None if there is none.

    With d = firstdiff(me, newcomer) >= shift the condition is on bit d - shift of v alone, so every
    key of the range moves and none outside it does. With d < shift the prefix does not contain bit
    d: any value may hold movers, the range is [x, max] and only a check of the full key decides
    (moves_to). With me == newcomer nothing moves."""
    d = firstdiff(me, newcomer)
    vmax = (1 << (bits - shift)) - 1
    if d < 0 or x > vmax:
        return None
    if d < shift:
        return (x, vmax)
    b = d - shift
    low = (1 << b) - 1  # the bits below b: free inside a block
    want = (newcomer >> d) & 1
    if (x >> b) & 1 == want:
        return (x, x | low)
    if want:  # x's bit b is 0: the moving block is the upper half of x's pair of blocks
        lo = (x & ~low) | (1 << b)
    else:  # x's bit b is 1: the next pair of blocks, its lower half
        lo = ((x >> (b + 1)) + 1) << (b + 1)
        if lo > vmax:
            return None
    return (lo, lo | low)


def moving_ranges(me: int, newcomer: int, first_at_or_after: Callable[[int], int | None], *,
                  shift: int = 0, bits: int = ID_BITS) -> Iterator[tuple[int, int]]:
    """Seed 000's join transfer as a skip-scan: the ranges [lo, hi] of index values to read so that
    every present key closer to newcomer than to me is in one of them, each starting at a present
    value. `first_at_or_after(v)` is the index's seek (the smallest present value >= v, or None);
    a caller reads each range yielded, then checks the full keys (needed when shift > 0 and
    firstdiff(me, newcomer) < shift: the prefix then stops above the moving bit).

    Cost: at most two seeks per present block of prefixes above the moving bit (one that lands in
    the moving half, one that skips past it), whatever the number of keys; ranges that hold no
    key are never yielded."""
    vmax = (1 << (bits - shift)) - 1
    x = 0
    while True:
        r = moving_range_after(me, newcomer, x, shift=shift, bits=bits)
        if r is None:
            return
        lo, hi = r
        v = first_at_or_after(lo)
        if v is None:
            return
        if v <= hi:
            yield (v, hi)
            if hi >= vmax:
                return
            x = hi + 1
        else:
            x = v  # the next present value: the moving range at or after it comes next


def prefix_moves(v: int, me: int, newcomer: int, *, shift: int = 0) -> bool | None:
    """For index value v (key >> shift, unsigned): True if every key under it is closer to newcomer
    than to me, False if none is, None if the value does not say (the moving bit is below it)."""
    d = firstdiff(me, newcomer)
    if d < 0:
        return False
    if d < shift:
        return None
    return (v >> (d - shift)) & 1 == (newcomer >> d) & 1
