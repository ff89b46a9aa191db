"""The lab's emulated links end to end: wall time measured over real sockets beside what the link
model says, for the slow-drip site, one response near and far (new and kept-alive connection),
and four flows sharing one ISP interconnect.

These figures used to be wall-clock assertions in tests/test_lab_server.py, which now checks
the server's schedule on a virtual model clock (exact, whatever the machine's load) and the
model's numbers directly. Here the tolerances are the ones those tests used.

    python bench/lab_linkmodel.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.linkmodel import LinkModel  # noqa: E402
from lab.testing import ServerThread, connect, small_topology  # noqa: E402
from lab.web import Web  # noqa: E402

OUTSIDE = "127.0.0.1"  # a client outside the plan: no link model, only the drip's own pacing


def raw_get(sock, host: str, target: str = "/") -> tuple[float, float, int]:
    """One GET on an open socket: (seconds to the first byte, seconds to the last, wire bytes)."""
    t0 = time.perf_counter()
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = sock.recv(65536)
    t_first = time.perf_counter() - t0
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"connection closed after {len(body)} of {n} body bytes")
        body += chunk
    return t_first, time.perf_counter() - t0, len(head) + 4 + n


def link_web(**link) -> Web:
    topo = small_topology()
    spec = dataclasses.replace(topo.spec, link=dataclasses.replace(topo.spec.link, **link))
    return Web(type(topo)(spec), seed=5, time_scale=1.0)


Row = tuple[str, float, float, str, bool]  # name, measured s, model s, tolerance, within it


def drip() -> list[Row]:
    web = Web(small_topology(drip_total_bytes=2048), seed=5, time_scale=100.0)
    with ServerThread(web) as st:
        s = st.web.topology.hostile_sites["slow-drip"]
        spec = st.web.spec
        sock = connect(s, st.port, OUTSIDE)
        t_first, total, _ = raw_get(sock, s.host)
        sock.close()
        time.sleep(2 * spec.drip_interval_s / web.time_scale)  # the drip's last pause, before the server stops
    # 2048 bytes, 64 per model second from time 0: the last ones leave at 31 model s.
    want = (math.ceil(2048 / spec.drip_bytes) - 1) * spec.drip_interval_s / web.time_scale
    return [("slow drip: first byte", t_first, 0.0, "< 0.1 s", t_first < 0.1),
            ("slow drip: whole body (2 KB)", total, want, "0.25-1.5 s", 0.25 < total < 1.5)]


def delays() -> list[Row]:
    web = link_web()
    topo = web.topology
    model = LinkModel(topo)
    near = next(s for s in topo.normal_sites if (s.isp, s.city) == ("telecom", "beijing"))
    far = next(s for s in topo.normal_sites if (s.isp, s.city) == ("unicom", "guangzhou"))
    src = topo.agent_address("telecom", "beijing")
    rows: list[Row] = []
    with ServerThread(web) as st:
        for name, site in (("near (same block)", near), ("far (unicom-guangzhou)", far)):
            sock = connect(site, st.port, src)
            for first in (True, False):
                _, got, nbytes = raw_get(sock, site.host)
                want = model.expected_time(src, site.ip, nbytes, first=first)
                ok = abs(got - want) <= max(0.25 * want, 0.006)
                rows.append((f"{name}, {'new' if first else 'kept'} connection, {nbytes:,} B", got, want,
                             "+-25% or 6 ms", ok))
            sock.close()
    return rows


def interconnect() -> list[Row]:
    # No latency, fast flows, a 2 Mbit/s telecom-unicom interconnect: bandwidth alone decides.
    web = link_web(hop_ms=0.0, ms_per_100km=0.0, inter_isp_penalty_ms=0.0, flow_kbps=80_000.0,
                   interconnect_kbps=2000.0, interconnect_burst_kb=0.0)
    topo = web.topology
    far = [s for s in topo.normal_sites if s.isp == "unicom"][:4]
    rate, flow_rate = 2000 * 125.0, 80_000 * 125.0
    results: dict[int, int] = {}

    def get(k: int, site, port: int) -> None:
        sock = connect(site, port, topo.agent_address("telecom", "beijing", k))
        results[k] = raw_get(sock, site.host, web.page_path(site, 0))[2]
        sock.close()

    with ServerThread(web) as st:
        sock = connect(far[0], st.port, topo.agent_address("telecom", "beijing", 7))
        _, single, n_single = raw_get(sock, far[0].host)
        sock.close()
        time.sleep(single)  # let the bucket drain before the concurrent run
        threads = [threading.Thread(target=get, args=(k, s, st.port)) for k, s in enumerate(far)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        together = time.perf_counter() - t0
        sock = connect(far[0], st.port, topo.agent_address("unicom", "harbin"))
        _, local, n_local = raw_get(sock, far[0].host)
        sock.close()
    want_single = n_single / rate
    want_together = sum(results.values()) / rate
    return [(f"one flow across the interconnect, {n_single:,} B", single, want_single, "+-30%",
             abs(single - want_single) <= 0.3 * want_single),
            (f"4 flows sharing it, {sum(results.values()):,} B", together, want_together, "+-25%",
             abs(together - want_together) <= 0.25 * want_together),
            (f"same bytes within unicom, {n_local:,} B", local, n_local / flow_rate, "< 1/4 of the one flow",
             local < single / 4)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement")
    args = ap.parse_args()
    bad = 0
    print(f"{'figure':<52} {'measured':>10} {'model':>10} {'ratio':>7}  tolerance")
    for run in range(args.repeat):
        if args.repeat > 1:
            print(f"-- run {run + 1}")
        for name, got, want, tol, ok in drip() + delays() + interconnect():
            ratio = f"{got / want:6.2f}x" if want else "      -"
            print(f"{name:<52} {got * 1000:8.1f}ms {want * 1000:8.1f}ms {ratio}  {tol}: {'OK' if ok else 'OUTSIDE'}")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
