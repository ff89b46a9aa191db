#!/usr/bin/env bash
# Crawl real sites on this machine: `manager crawl` (docs/quickstart.md) after creating or
# reusing .venv, like demo.sh. Arguments go to `manager crawl`, e.g.
#   bash scripts/crawl.sh urls.txt --out run/mycrawl --contact https://you.example/crawler
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec manager crawl "$@"
