"""routing: where a discovered URL goes. The router (pure: per-owner batches of alpha, waiting
hosts), the service that resolves and pushes (the outbox holds what is owed), and intake, which
takes pushed and local URLs into the seen set and the frontier. Imports state, crawl's scope and
incidents, placement, validate (intake checks each pushed URL), the waker, the agent's client and
wancrawl; never ownership."""
