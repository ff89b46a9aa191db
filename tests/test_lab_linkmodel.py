"""The pure link model: RTT formula, flow pacing, one shared bucket per ISP pair."""

import dataclasses

import pytest

from lab import topology
from lab.linkmodel import LinkModel, TokenBucket


def model(**link):
    spec = topology.default_spec()
    spec = dataclasses.replace(spec, link=dataclasses.replace(spec.link, **link))
    return LinkModel(topology.Topology(spec))


def test_rtt_from_hops_distance_and_isp_penalty():
    m = model(hop_ms=2.0, ms_per_100km=1.0, inter_isp_penalty_ms=30.0)
    t = m.topology
    same = m.path(t.agent_address("telecom", "beijing"), "127.1.1.10")
    assert same.hops == 1 and same.rtt == pytest.approx(0.002)
    city = m.path(t.agent_address("telecom", "beijing"), "127.1.3.10")
    km = t.distance_km("beijing", "guangzhou")
    assert city.hops == 2 and city.rtt == pytest.approx((4 + km / 100) / 1000)
    both = m.path(t.agent_address("telecom", "beijing"), "127.2.3.10")
    assert both.inter_isp and both.hops == 3 and both.rtt == pytest.approx((6 + km / 100 + 30) / 1000)
    assert m.path("127.0.0.1", "127.1.1.10").rtt == 0.0


def test_token_bucket_grants_at_rate_after_burst():
    b = TokenBucket(1000.0, burst_bytes=500)
    assert b.reserve(500, 0.0) == 0.0  # the burst passes at once
    assert b.reserve(1000, 0.0) == pytest.approx(1.0)
    assert b.reserve(1000, 5.0) == pytest.approx(5.5)  # idle time refills the burst


def test_flows_across_one_isp_pair_share_its_interconnect():
    m = model(flow_kbps=8000.0, interconnect_kbps=800.0, interconnect_burst_kb=0.0, chunk_bytes=1000)
    a = [m.flow(f"127.1.1.{2 + k}", "127.2.1.10") for k in range(4)]
    ends = [0.0] * 4
    for _ in range(100):  # 4 flows x 100 KB interleaved chunk by chunk
        for k, f in enumerate(a):
            ends[k] = f.send(1000, ends[k] if ends[k] else 0.0)
    # 400 KB through 100 KB/s: 4 s for all, though each flow alone could do 1 MB/s.
    assert max(ends) == pytest.approx(4.0, rel=0.02)
    assert min(ends) > 3.5  # fair: nobody finishes early
    # The reverse direction is the same pair and the same bucket; another pair is independent.
    assert m.interconnect("unicom", "telecom") is m.interconnect("telecom", "unicom")
    other = m.flow("127.1.1.2", "127.3.1.10")
    assert other.send(100_000, 0.0) == pytest.approx(1.0)  # its own 100 KB/s, not queued behind
    same_isp = m.flow("127.1.1.2", "127.1.2.10")
    assert same_isp.buckets == [] and same_isp.send(100_000, 0.0) == pytest.approx(0.1)


def test_per_pair_override_access_link_and_first_request():
    m = model(interconnect={"unicom-telecom": 80.0}, access_kbps=800.0, first_request_rtts=2.0)
    f = m.flow("127.1.1.2", "127.2.1.10")
    assert f.buckets[0].rate == pytest.approx(10_000.0)
    assert f.buckets[1].rate == pytest.approx(100_000.0)
    rtt = f.path.rtt
    assert f.response_start(1.0) == pytest.approx(1.0 + 2 * rtt)
    assert f.response_start(2.0) == pytest.approx(2.0 + rtt)  # keep-alive: no handshake
    assert m.expected_time("127.1.1.2", "127.1.1.10", 0) == pytest.approx(2 * 0.002)


def test_access_link_per_address_or_shared_by_a_block():
    per_address = model(access_kbps=800.0)
    a, b = per_address.flow("127.1.1.2", "127.1.1.10"), per_address.flow("127.1.1.3", "127.1.1.10")
    assert a.buckets[0] is not b.buckets[0], "two agents, two access links"
    per_block = model(access_kbps=800.0, access_scope="block")
    a, b = per_block.flow("127.1.1.2", "127.1.1.10"), per_block.flow("127.1.1.3", "127.2.2.10")
    c = per_block.flow("127.1.2.2", "127.1.1.10")
    assert a.buckets[-1] is b.buckets[-1], "agents of one block share its line"
    assert c.buckets[-1] is not a.buckets[-1], "another block, another line"


def test_access_scope_is_checked():
    from wancrawl.errors import ConfigError

    spec = topology.default_spec()
    bad = dataclasses.replace(spec, link=dataclasses.replace(spec.link, access_scope="city"))
    with pytest.raises(ConfigError, match="access_scope"):
        topology._validate(bad, "test")


def test_an_access_line_of_its_own_per_address():
    """Agents of unequal bandwidth (seed 003's net_band): one address's line at its own rate, the
    others at the default; an override alone turns a line on."""
    m = model(access_kbps=800.0, access={"127.1.1.3": 200.0})
    assert m.flow("127.1.1.2", "127.1.1.10").buckets[-1].rate == 800.0 * 125
    assert m.flow("127.1.1.3", "127.1.1.10").buckets[-1].rate == 200.0 * 125
    only = model(access_kbps=0.0, access={"127.1.1.3": 200.0})
    assert only.flow("127.1.1.2", "127.1.1.10").buckets == []
    assert only.flow("127.1.1.3", "127.1.1.10").buckets[-1].rate == 200.0 * 125
