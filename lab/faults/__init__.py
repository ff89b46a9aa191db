"""The lab's fault harness (issue 34, item 6): bench/chaos.py's scenarios and the pieces the other
lab benches share with it (abuse, balance, the seed benches): observe a running cluster
(observe.py), inject a fault (inject.py, scenarios.py, revisits.py), run one scenario end to end
(run.py), compare the crawl against the lab's truth (measure.py, pure) and print the tables
(table.py). Beside lab/truth.py and lab/checks.py; like them, it imports nothing of bench/.

Its modules depend one way (the import contract `fault-harness` in pyproject.toml): run on inject,
revisits and table; those on observe and scenarios; everything on measure, which imports none of
them.
"""
