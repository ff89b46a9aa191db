"""ownership: a host's whole state moving between agents. The ledger (export, import, merge,
drop a host across frontier, seen set and dispatcher), handover, replicas and the replicator
(r backups), and settling after an epoch change (hand out, promote, claim). Imports crawl, state,
placement and the agent's client; never routing."""
