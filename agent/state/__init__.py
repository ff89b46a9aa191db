"""state: what the agent keeps on disk about its own hosts. The frontier (per-host BFS queues,
page counts), the seen set, the change log of each flush (for replication), the commit that makes
a page's capture and links durable together, the spool of pages owed to storage and its shipper,
and the outbox of URLs owed to peers. Imports only agent.settings, storage's client and wancrawl."""
