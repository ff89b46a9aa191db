"""state: what the agent keeps on disk about its own hosts. The frontier (per-host BFS queues,
page counts), the seen set, the host-key index both keep (keyindex: seed 000's firstdiff, the
hosts a join moves, read by key range), the change log of each flush (for replication), the commit that makes
a page's capture and links durable together, the spool of pages owed to storage and its shipper,
the outbox of URLs owed to peers, what SQLite can store (storable: poison rows refused or left
out) and whether commits make progress (progress). Imports only agent.settings, storage's client
and wancrawl."""
