"""kademlia: the Kademlia overlay of the consultant-less mode (issue 22, seeds 000 and 001,
docs/kademlia.md): the overlay node (overlay.py), the Placement implementation (placement.py), its
gRPC transport (wire.py), certificate-bound ids (identity.py) and load balancing by delegation
(balance.py, delegation.py). The pure routing core it drives (the k-bucket table, the iterative
FIND_NODE lookup and the XOR key space) lives at the bottom floor, in wancrawl/kademlia/, shared
with the consultant's XOR partitioner and the overlay's query client (agent/peers.py)."""
