"""crawl: the fetch loop. The dispatcher (dispatcher.py) picks due hosts under politeness (per
host and IP), admits them (admission.py, pure: budgets, DNS, robots.txt), fetches robots.txt
first where needed (robotstxt.py) and spawns each page's fetch and its steps after it (page.py:
outcome, retry, truncation, redirect, parse, links, record; sitemaps in sitemap_reader.py);
a host's crawl state is one object (hosts.py). Imports state (the frontier it pops, the revisit
policies), placement's gate (the fence), fetch, settings, the waker and wancrawl; discovered URLs
leave through a `route` callable."""
