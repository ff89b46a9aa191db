#!/bin/bash
cd /work/wt-scale
nice -n 5 .venv/bin/python bench/parts/consultant_resolve.py --hosts 100000 --agents 1000 --tls off --strategies hash,geo > runs/consultant-100k-1000a.log 2>&1
nice -n 5 .venv/bin/python bench/parts/consultant_resolve.py --hosts 100000 --agents 16 --tls off --strategies hash,geo > runs/consultant-100k-16a.log 2>&1
