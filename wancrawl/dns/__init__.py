"""DNS for the agents and the consultant (issue 37): what a look-up says (answers.py), the cache
with its TTL bounds and negative cache (cache.py, pure) and the c-ares backend (cares.py).
wancrawl/hostres.py is the interface the services use."""
