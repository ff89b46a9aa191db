"""kademlia: the pure Kademlia core every party computes alike (seeds 000 and 001,
docs/kademlia.md), apart from any process: the XOR key space (xorspace.py: 160-bit ids, the host
key, certificate-bound node ids, the key ranges a join moves), the k-bucket routing table
(table.py) and the iterative FIND_NODE lookup as a state machine with its batched async driver
(lookup.py). No I/O of its own, no settings: the caller passes k, alpha, the clock and the RPC.

Here, at the bottom floor, because more than the agents' overlay (agent/placement/kademlia/)
uses it: the consultant's XOR partitioner takes the host key, the overlay's query client
(agent/peers.py, for storage and the manager) runs the same lookup, and the agent's state indexes
hosts by key. go-libp2p-kbucket keeps its keyspace apart in the same way. Imports nothing of the
project but itself."""
