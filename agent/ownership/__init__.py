"""ownership: a host's whole state moving between agents. The ledger (export, import, merge,
drop a host across frontier, seen set and dispatcher), handover, replicas and the replicator
(r backups), the peer guard (who may send a host's state), and settling after an epoch change
(hand out, promote, claim). Imports crawl, state, placement, the waker, the agent's client and
wancrawl (the Kademlia key space among it); never routing."""
