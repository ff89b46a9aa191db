#!/bin/bash
# before (main) and after (this branch), one after the other, 20,000 pages, 1 agent
cd /tmp/scale-before && PYTHONPATH=/tmp/scale-before nice -n 5 /work/wt-scale/.venv/bin/python bench/scale.py --pages 20000 --agents 1 > /work/wt-scale/runs/stall-before.log 2>&1
cd /work/wt-scale && nice -n 5 .venv/bin/python bench/scale.py --pages 20000 --agents 1 > /work/wt-scale/runs/stall-after.log 2>&1
