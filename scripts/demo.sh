#!/usr/bin/env bash
# The main job: the lab (an emulated WAN on loopback) with three agents in three ISP/city
# blocks, seeds injected through the manager, the crawl run to its end, then a summary and
# plots. Creates or reuses .venv. Extra arguments go to `lab demo` (e.g. --strategy geo).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec lab demo "$@"
