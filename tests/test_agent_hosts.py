"""The hosts' crawl state (agent/crawl/hosts.py): one object per host, its give-ups counted once
each, its origins found by origin, and nothing left once the host is dropped."""

from __future__ import annotations

from agent.crawl.hosts import UNRESOLVED, CrawlHosts, unresolved
from agent.crawl.incidents import Incidents


def _hosts(queues: dict[str, int]) -> tuple[CrawlHosts, list[str], Incidents]:
    unscheduled: list[str] = []
    incidents = Incidents(lambda: 0.0)
    return CrawlHosts(lambda h: queues.pop(h, 0), unscheduled.append, incidents), unscheduled, incidents


def test_a_host_is_given_up_once_and_its_queue_dropped_each_time():
    hosts, unscheduled, incidents = _hosts({"a.test": 7, "b.test": 2})
    hosts.give_up("a.test", "page budget (10 pages)", "host_page_budget")
    hosts.give_up("a.test", "page budget (10 pages)", "host_page_budget")  # URLs found since: dropped, not counted again
    hosts.give_up("b.test", "DNS: NXDOMAIN", "dns_failure")
    st = hosts.stats
    assert (st.hosts_given_up, st.budget_dropped, st.hosts_dns_failed) == (2, 9, 1)
    assert unscheduled == ["a.test", "a.test", "b.test"]
    assert {k: v for k, v in incidents.counts.items() if v} == {"host_page_budget": 1, "dns_failure": 1}
    assert hosts.given_up("a.test") == "page budget (10 pages)" and hosts.given_up("c.test") is None
    assert hosts.given_up_count == 2


def test_origins_are_found_by_origin_and_forgotten_with_their_host():
    hosts, _, _ = _hosts({})
    hosts.resolve("a.test", "10.0.0.1")
    hosts.resolve("b.test", None)  # looked up: no address
    assert hosts.resolved("a.test") and hosts.resolved("b.test") and not hosts.resolved("c.test")
    # Each host without an address has its own scheduler key (issue 37): one shared key put every
    # failed name behind one per-IP delay.
    assert (hosts.ip("a.test"), hosts.ip("b.test"), hosts.ip("c.test")) == ("10.0.0.1", UNRESOLVED + "b.test", UNRESOLVED + "c.test")
    assert unresolved(hosts.ip("b.test")) and not unresolved(hosts.ip("a.test"))
    hosts.add_origin("a.test", "http://a.test")
    hosts.give_up_origin("a.test", "https://a.test", "robots.txt unreachable for 3600s")
    hosts.give_up_origin("a.test", "https://a.test", "robots.txt unreachable for 3700s")  # counted once, reason updated
    hosts.give_up("a.test", "forbidden address", "forbidden_address")
    assert hosts.origin_given_up("http://a.test") is None
    assert hosts.origin_given_up("https://a.test") == "robots.txt unreachable for 3700s"
    assert sorted(hosts.origins("a.test")) == ["http://a.test", "https://a.test"]
    assert hosts.all_given_up() == {"a.test": "forbidden address", "https://a.test": "robots.txt unreachable for 3700s"}
    assert (hosts.stats.origins_given_up, hosts.given_up_count) == (1, 2)
    assert sorted(hosts.drop("a.test")) == ["http://a.test", "https://a.test"]
    assert hosts.origin_given_up("https://a.test") is None and not hosts.resolved("a.test") and list(hosts.origins("a.test")) == []
    assert hosts.all_given_up() == {} and hosts.given_up_count == 0
    assert hosts.stats.origins_given_up == 1, "a counter is a total: dropping a host does not take it back"
    assert hosts.drop("a.test") == []
