"""The lab web container's health check (scripts/compose-e2e.sh): the first site's home page
answers 200 on the one socket. A file, not `python -c "..."`: podman 4.3's Docker API splits a
health check's arguments at spaces (docs/deployment.md)."""

import http.client
import sys

c = http.client.HTTPConnection("127.0.0.1", 8080, timeout=5)
c.request("GET", "/", headers={"Host": "www.s0000.telecom-beijing.lab:8080"})
sys.exit(0 if c.getresponse().status == 200 else 1)
