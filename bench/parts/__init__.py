"""Benchmarks of one part of one service each (the frontier, the seen set, link extraction, the
scheduler, the fetcher, the consultant's Resolve, the firstdiff index): run as
`python bench/parts/NAME.py`. The whole-system benches stay one level up."""
