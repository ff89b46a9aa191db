"""Ranked-address failover (wancrawl/failover.py): the pure ranking against a model, and the
consultant client moving from a dead or hung replica to the next within one call."""

from __future__ import annotations

import contextlib
import socket

import pytest
from hypothesis import given, settings, strategies as st

from consultant.client import ConsultantClient
from wancrawl import errors
from wancrawl.failover import Ranking, parse_addresses
from wancrawl.v1 import common_pb2

from conftest import free_port
from consultant_helpers import running, settings_for


def test_addresses_parse_from_commas_lists_and_both():
    assert parse_addresses("a:1") == ("a:1",)
    assert parse_addresses(" a:1, b:2 ,") == ("a:1", "b:2")
    assert parse_addresses(["a:1", "b:2,c:3"]) == ("a:1", "b:2", "c:3")
    assert parse_addresses("") == ()
    with pytest.raises(errors.ConfigError, match="consultant: 'a:1' is listed twice"):
        parse_addresses("a:1,a:1", where="consultant")


def test_stays_on_the_replica_that_answers_and_goes_back_once_its_time_is_up():
    r = Ranking(("a", "b", "c"), retry_after=5.0, max_retry_after=20.0)
    assert r.order(0.0) == [0, 1, 2]
    r.failed(0, 1.0)
    assert r.order(1.0) == [1, 2, 0]        # a is tried last, not skipped
    r.answered(1)
    assert r.order(5.9) == [1, 2, 0]        # stays on b while a waits
    assert r.order(6.0) == [0, 1, 2]        # a's time is up: the next call probes it first
    r.failed(0, 6.0)                        # still dead: twice as long
    assert r.order(15.9)[0] == 1 and r.order(16.0)[0] == 0
    r.failed(0, 16.0)
    r.failed(0, 36.0)                       # 20, 40 -> capped at max_retry_after
    assert r.order(55.9)[0] == 1 and r.order(56.0)[0] == 0
    r.answered(0)
    r.failed(0, 60.0)                       # an answer reset the doubling
    assert r.order(65.0)[0] == 0
    r.trying(0, 65.0)                       # a probe under way: other calls go to b meanwhile
    assert r.order(65.0)[0] == 1 and r.order(70.0)[0] == 0
    r.trying(1, 65.0)                       # an address that never failed is not held off
    assert not r.is_down(1, 65.0)
    r.answered(0)
    assert r.order(65.0)[0] == 0


def test_every_address_down_tries_the_one_back_soonest_first():
    r = Ranking(("a", "b"), retry_after=5.0)
    r.failed(0, 0.0)
    r.failed(0, 5.0)   # a: down until 15
    r.failed(1, 6.0)   # b: down until 11
    assert r.order(7.0) == [1, 0]


def test_bad_rankings_are_refused():
    for bad in [dict(addresses=()), dict(addresses=("a", "a")), dict(addresses=("a",), retry_after=0.0),
                dict(addresses=("a",), retry_after=9.0, max_retry_after=5.0)]:
        with pytest.raises(errors.ConfigError):
            Ranking(**bad)


class Model:
    """The rules of Ranking's docstring, written again plainly: per address the failures in a
    row and the time of the last; up = no failure in a row, or the wait since the last is over."""

    def __init__(self, n: int, retry: float, cap: float):
        self.n, self.retry, self.cap = n, retry, cap
        self.row = [0] * n
        self.last = [0.0] * n

    def back_at(self, i: int) -> float:
        return self.last[i] + min(self.cap, self.retry * 2 ** (self.row[i] - 1)) if self.row[i] else 0.0

    def order(self, now: float) -> list[int]:
        up = [i for i in range(self.n) if self.back_at(i) <= now]
        return up + sorted((i for i in range(self.n) if i not in up), key=lambda i: (self.back_at(i), i))


events = st.lists(st.tuples(st.floats(0, 30), st.integers(0, 3), st.sampled_from(["answered", "failed", "trying"])), max_size=40)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 4), retry=st.floats(0.5, 10), cap_factor=st.floats(1, 16), steps=events)
def test_ranking_agrees_with_the_model(n, retry, cap_factor, steps):
    r, m = Ranking(tuple(f"r{i}:1" for i in range(n)), retry, retry * cap_factor), Model(n, retry, retry * cap_factor)
    now = 0.0
    for dt, i, what in steps:
        now += dt
        i %= n
        order = r.order(now)
        assert sorted(order) == list(range(n)), "each address once per call"
        assert order == m.order(now)
        assert [k for k in order if not r.is_down(k, now)] == sorted(k for k in order if not r.is_down(k, now)), "up ones keep their rank"
        if what == "answered":
            r.answered(i)
            m.row[i] = 0
        elif what == "trying":
            r.trying(i, now)
            if m.row[i]:
                m.last[i] = now  # a probe: held off for the wait it just served
        else:
            r.failed(i, now)
            m.row[i] += 1
            m.last[i] = now
            if n > 1 and any(not r.is_down(k, now) for k in range(n)):
                assert r.order(now)[0] != i, "a failed address is not tried first while another is up"


@contextlib.contextmanager
def silent_listener():
    """A TCP port that accepts connections and never answers: a hung (paused) server."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield f"127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def test_client_moves_past_a_dead_and_a_hung_replica_within_one_call(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (srv, _):
            live = srv.address
            dead = f"127.0.0.1:{free_port()}"
            with silent_listener() as hung:
                async with ConsultantClient([dead, hung, live], timeout=6.0, attempt_timeout=1.0) as c:
                    r = await c.register("a1", "127.0.0.9:7000")
                    first = c.replicas.stats.as_dict()
                    # Both bad ones are now down: the next calls go straight to the live one.
                    await c.heartbeat("a1", common_pb2.LoadReport())
                    listed = await c.list_agents()
                    after = c.replicas.stats.as_dict()
                    # A status that is the service's answer is not failed over.
                    with pytest.raises(errors.NotFound):
                        await c.heartbeat("nobody", common_pb2.LoadReport())
                    assert c.replicas.stats.failovers == after["failovers"]
                    return r, first, after, listed

    r, first, after, listed = run(go())
    assert r.epoch >= 1 and [a.agent_id for a in listed.agents] == ["a1"]
    assert first == {"attempts": 3, "failovers": 2, "all_failed": 0}
    assert after["attempts"] == 5 and after["failovers"] == 2


def test_client_with_every_replica_dead_says_unavailable(run):
    async def go():
        async with ConsultantClient(f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}", timeout=3.0) as c:
            with pytest.raises(errors.Unavailable, match="no replica of 127.0.0.1:.*,127.0.0.1:.* answered"):
                await c.list_agents()
            return c.replicas.stats.as_dict()

    assert run(go()) == {"attempts": 2, "failovers": 1, "all_failed": 1}


def test_one_replica_takes_the_whole_deadline_as_before(run):
    async def go():
        with silent_listener() as hung:
            async with ConsultantClient(hung, timeout=1.5) as c:
                with pytest.raises(errors.Unavailable, match="DEADLINE_EXCEEDED"):  # the whole 1.5 s
                    await c.list_agents()
                return c.replicas.stats.as_dict()

    assert run(go()) == {"attempts": 1, "failovers": 0, "all_failed": 1}
