#!/usr/bin/env bash
# The main job. Until the demo issue (#6) lands, this writes the lab's geo/ASN databases and
# starts the consultant on them with the ISP strategy; try, in another terminal:
#   .venv/bin/consultant agents      .venv/bin/consultant explain <host from run/lab/geo/hosts>
# Ctrl-C stops it. Extra arguments go to `consultant serve`.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
mkdir -p run/lab
lab geodb --out run/lab/geo
echo "lab databases in run/lab/geo; starting the consultant (configs/consultant-asn.toml) on 127.0.0.1:50051"
exec consultant serve --config configs/consultant-asn.toml "$@"
