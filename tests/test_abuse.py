"""bench/abuse.py's pure helpers: which hosts each attack targets (by the attacker's place in a
host's preference list), the raw non-UTF-8 bytes it sends, and when an answer counts as refused."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("abuse", REPO / "bench" / "abuse.py")
assert _spec and _spec.loader
abuse = importlib.util.module_from_spec(_spec)
sys.modules["abuse"] = abuse  # dataclasses look their module up there
_spec.loader.exec_module(abuse)

M = "mallory"  # the attacker
AGENTS = ["alice", "bob", "carol", M]
# host -> preference list, owner first (three agents per host, as the consultant answers)
ROUTES = {
    "out1": ("alice", "bob", "carol"),      # mallory not in the list
    "out2": ("bob", "carol", "alice"),
    "fb1": ("alice", M, "bob"),             # mallory first backup
    "fb2": ("carol", M, "alice"),
    "low1": ("bob", "alice", M),            # mallory second backup
    "own1": (M, "carol", "alice"),          # mallory owns it
}


def fits(role: str, route: tuple[str, ...], receiver: str) -> bool:
    """The roles as docs/abuse.md states them, written out independently of abuse._receiver."""
    owner, rest = route[0], route[1:]
    return {
        "outsider": M not in route and receiver == owner,
        "other-owned": owner != M and receiver == owner,
        "third": owner != M and receiver not in (owner, M),
        "backup": owner != M and route[1] != M and receiver == route[1],
        "below": M in rest and receiver == owner,
        "own": owner == M and receiver == route[1],
        "first-backup": route[1] == M and receiver == owner,
    }[role]


@pytest.mark.parametrize("role", ["outsider", "other-owned", "third", "backup", "below", "own", "first-backup"])
def test_every_pick_fits_its_role_and_every_fitting_host_is_found(role):
    got = abuse.pick_targets(M, ROUTES, AGENTS, [abuse.Need("x", role, 99, sorted(ROUTES))])["x"]
    assert all(fits(role, t.preference, t.receiver) for t in got)
    # every host that can fit the role (some receiver fits) is picked once
    expect = {h for h, r in ROUTES.items() if any(fits(role, r, a) for a in AGENTS)}
    assert {t.host for t in got} == expect
    assert all(t.preference == ROUTES[t.host] for t in got)


def test_third_prefers_an_agent_outside_the_list():
    # low1 (bob, alice, mallory): alice is a backup, carol is outside the list (she holds no replica).
    got = abuse.pick_targets(M, ROUTES, AGENTS, [abuse.Need("x", "third", 1, ["low1"])])["x"]
    assert [(t.host, t.receiver) for t in got] == [("low1", "carol")]


def test_needs_take_distinct_hosts_in_their_order_then_reuse():
    needs = [abuse.Need("a", "outsider", 1, ["out2", "out1"]),
             abuse.Need("b", "outsider", 1, ["out2", "out1"]),
             abuse.Need("c", "outsider", 1, ["out2", "out1"])]
    got = abuse.pick_targets(M, ROUTES, AGENTS, needs)
    assert [t.host for t in got["a"]] == ["out2"]       # the order is the need's preference
    assert [t.host for t in got["b"]] == ["out1"]       # distinct from a's
    assert [(t.host, t.reused) for t in got["c"]] == [("out2", True)]  # none fresh left: reused, marked
    assert not got["a"][0].reused and not got["b"][0].reused


def test_a_need_nothing_fits_gets_nothing():
    routes = {"h": (M, "alice", "bob")}
    assert abuse.pick_targets(M, routes, AGENTS, [abuse.Need("x", "outsider", 2, ["h"])]) == {"x": []}
    # a host the consultant did not answer for (no list) fits nothing
    assert abuse.pick_targets(M, {}, AGENTS, [abuse.Need("x", "other-owned", 1, ["gone"])]) == {"x": []}


def test_orders():
    total = {"a": 10, "b": 5, "c": 3, "d": 8}
    left = {"a": 2, "b": 5, "c": 3, "d": 8}      # a mostly done
    assert abuse.by_work_left(total, left) == ["d", "b", "c", "a"]
    assert abuse.smallest_first(total, avoid={"c"}) == ["b", "d", "a"]


def test_not_utf8_keeps_the_framing_and_breaks_only_the_marked_string():
    from google.protobuf.message import DecodeError

    from wancrawl.v1 import consultant_pb2

    msg = consultant_pb2.ResolveRequest(hosts=["ok.example", f"{abuse.MARK}.example"])
    raw = abuse.not_utf8(msg.SerializeToString())
    assert len(raw) == msg.ByteSize()
    with pytest.raises(UnicodeDecodeError):
        raw.decode()
    # what a server's parser meets: the message no longer parses as proto3 (a string not UTF-8)
    with pytest.raises(DecodeError):
        consultant_pb2.ResolveRequest.FromString(raw)
    # the bytes without the replacement parse back to the message
    assert consultant_pb2.ResolveRequest.FromString(raw.replace(b"\xff", b"Q")) == msg
    with pytest.raises(ValueError):
        abuse.not_utf8(b"no placeholder here")


def A(code, taken=0, refused=()):
    return abuse.Answer("rpc", code, taken=taken, refused=list(refused))


@pytest.mark.parametrize("answers,want,refused", [
    ([A("PERMISSION_DENIED")], abuse.REFUSAL_CODES, True),
    ([A("FAILED_PRECONDITION"), A("INVALID_ARGUMENT")], abuse.REFUSAL_CODES, True),
    ([A("OK", refused=["h"])], abuse.REFUSAL_CODES, True),                # HandOver: the host in `refused`
    ([A("OK", taken=1, refused=["h"])], abuse.REFUSAL_CODES, False),      # one host taken, another refused
    ([A("OK")], abuse.REFUSAL_CODES, False),                              # OK, nothing refused
    ([A("OK", refused=["h"]), A("OK", taken=3)], abuse.REFUSAL_CODES, False),
    ([A("UNKNOWN")], abuse.REFUSAL_CODES, False),                         # a crash is not a refusal
    ([A("INTERNAL")], abuse.REFUSAL_CODES, False),
    ([A("DEADLINE_EXCEEDED")], abuse.REFUSAL_CODES, False),               # a hang neither
    ([A("PERMISSION_DENIED")], frozenset({"INVALID_ARGUMENT"}), False),   # attack 7 wants INVALID_ARGUMENT
    ([A("INVALID_ARGUMENT")], frozenset({"INVALID_ARGUMENT"}), True),
    ([], abuse.REFUSAL_CODES, False),                                     # nothing sent proves nothing
])
def test_verdict(answers, want, refused):
    ok, why = abuse.verdict(answers, want)
    assert ok is refused
    assert (why == "") is refused
