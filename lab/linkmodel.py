"""The pure link model: RTT from distance, hops and ISP crossings; paced flows; shared interconnects."""

from __future__ import annotations

from dataclasses import dataclass

from lab.topology import LinkSpec, Topology


class TokenBucket:
    """A shared rate limit as GCRA (virtual scheduling): reservations return when bytes may pass.

    Times are model seconds supplied by the caller, so the bucket holds no clock and is
    trivially testable; flows that reserve chunk by chunk interleave and share the rate.
    """

    def __init__(self, rate_bps: float, burst_bytes: float = 0.0):
        self.rate = rate_bps  # bytes per second
        self.burst = burst_bytes
        self.tat = 0.0  # theoretical arrival time of the next byte

    def reserve(self, nbytes: int, now: float) -> float:
        """Take `nbytes`; the model time at which they have passed (>= now)."""
        self.tat = max(self.tat, now) + nbytes / self.rate
        return max(now, self.tat - self.burst / self.rate)


@dataclass(frozen=True)
class PathInfo:
    """What the model knows about one client -> site path."""

    client: tuple[str, str] | None  # (isp, city) of the client, None outside the plan
    site: tuple[str, str] | None
    rtt: float  # model seconds
    hops: int
    distance_km: float
    inter_isp: bool


class Flow:
    """One TCP connection's view of the model: its own pacing plus the buckets it shares."""

    def __init__(self, model: "LinkModel", path: PathInfo, buckets: list[TokenBucket]):
        self.model = model
        self.path = path
        self.buckets = buckets
        self.next_free = 0.0
        self.requests = 0
        rate = model.spec.flow_kbps * 125.0
        self.rate = rate if rate > 0 else 0.0

    def response_start(self, now: float) -> float:
        """When the first response byte may leave for a request that arrived at `now`."""
        rtts = self.model.spec.first_request_rtts if self.requests == 0 else 1.0
        self.requests += 1
        return now + rtts * self.path.rtt

    def send(self, nbytes: int, start: float) -> float:
        """Model time at which `nbytes` sent from `start` on have been delivered."""
        t = max(start, self.next_free)
        done = t + (nbytes / self.rate if self.rate else 0.0)
        for b in self.buckets:
            done = max(done, b.reserve(nbytes, t))
        self.next_free = done
        return done


class LinkModel:
    """Delays and shared capacity from addresses; all state is explicit, no clocks, no I/O."""

    def __init__(self, topology: Topology, spec: LinkSpec | None = None):
        self.topology = topology
        self.spec = spec or topology.spec.link
        self._interconnects: dict[tuple[str, str], TokenBucket] = {}
        self._access: dict[str, TokenBucket] = {}

    def path(self, client_ip: str, site_ip: str) -> PathInfo:
        s = self.spec
        c, t = self.topology.locate(client_ip), self.topology.locate(site_ip)
        if c is None or t is None:
            # A client outside the plan (a test harness on 127.0.0.1) sees a perfect network.
            return PathInfo(c, t, 0.0, 0, 0.0, False)
        inter_isp = c[0] != t[0]
        km = self.topology.distance_km(c[1], t[1])
        hops = 1 + (c[1] != t[1]) + inter_isp
        rtt_ms = hops * s.hop_ms + km / 100.0 * s.ms_per_100km + (s.inter_isp_penalty_ms if inter_isp else 0.0)
        return PathInfo(c, t, rtt_ms / 1000.0, hops, km, inter_isp)

    def interconnect(self, isp_a: str, isp_b: str) -> TokenBucket | None:
        """The one bucket shared by all flows between two ISPs (either direction)."""
        key = tuple(sorted((isp_a, isp_b)))
        b = self._interconnects.get(key)  # type: ignore[arg-type]
        if b is None:
            kbps = self.spec.interconnect.get(f"{key[0]}-{key[1]}", self.spec.interconnect.get(f"{key[1]}-{key[0]}", self.spec.interconnect_kbps))
            if kbps <= 0:
                return None
            b = self._interconnects[key] = TokenBucket(kbps * 125.0, self.spec.interconnect_burst_kb * 1024)  # type: ignore[index]
        return b

    def access(self, client_ip: str) -> TokenBucket | None:
        """The access link a client's flows share: its address's, or its block's."""
        key = client_ip
        if self.spec.access_scope == "block":
            where = self.topology.locate(client_ip)
            key = f"{where[0]}-{where[1]}" if where else client_ip
        kbps = self.spec.access.get(key, self.spec.access_kbps)
        if kbps <= 0:
            return None
        b = self._access.get(key)
        if b is None:
            b = self._access[key] = TokenBucket(kbps * 125.0, self.spec.chunk_bytes)
        return b

    def flow(self, client_ip: str, site_ip: str) -> Flow | None:
        """The connection's view of the model; None when either end is outside the plan (a
        test harness on 127.0.0.1): such a client sees a perfect network."""
        p = self.path(client_ip, site_ip)
        if p.client is None or p.site is None:
            return None
        buckets: list[TokenBucket] = []
        if p.inter_isp:
            ic = self.interconnect(p.client[0], p.site[0])
            if ic is not None:
                buckets.append(ic)
        acc = self.access(client_ip)
        if acc is not None:
            buckets.append(acc)
        return Flow(self, p, buckets)

    def expected_time(self, client_ip: str, site_ip: str, nbytes: int, *, first: bool = True) -> float:
        """Model seconds for one response of `nbytes` on an idle network (for tests and docs)."""
        f = self.flow(client_ip, site_ip)
        if f is None:
            return 0.0
        f.buckets = [TokenBucket(b.rate, b.burst) for b in f.buckets]  # idle copies
        if not first:
            f.requests = 1
        end = f.response_start(0.0)
        for off in range(0, nbytes, self.spec.chunk_bytes):
            end = f.send(min(self.spec.chunk_bytes, nbytes - off), end)
        return end
