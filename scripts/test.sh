#!/usr/bin/env bash
# The test command: create or reuse .venv, install the project, run the whole suite.
# Extra arguments go to pytest (e.g. bash scripts/test.sh -k consultant).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
python -m pytest -q -p no:cacheprovider "$@"
