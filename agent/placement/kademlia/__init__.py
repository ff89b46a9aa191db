"""kademlia: the Kademlia overlay of the consultant-less mode (issue 22, seeds 000 and 001,
docs/kademlia.md). The pure routing core lives here with no I/O: the k-bucket routing table
(table.py) and the iterative FIND_NODE lookup as a state machine with its batched async driver
(lookup.py); the gRPC overlay and the Placement implementation drive them. Ids and distances come
from wancrawl.xorspace, shared with the consultant's XOR partitioner."""
