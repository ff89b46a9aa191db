"""crawl: the fetch loop. The dispatcher picks due hosts under politeness (per host and IP) and
robots.txt, fetches through agent.fetch, decides each outcome (retry, redirect, give up, parse),
extracts links and applies scope. Imports state (the frontier it pops), placement's gate (the
fence), fetch, settings and wancrawl; discovered URLs leave through a `route` callable."""
