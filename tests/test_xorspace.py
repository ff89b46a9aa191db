"""wancrawl/kademlia/xorspace.py's firstdiff arithmetic against brute force: the ranges a join moves."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from wancrawl.kademlia import xorspace
from wancrawl.kademlia.xorspace import (
    ID_BITS,
    KEY_PREFIX_SHIFT,
    MAX_ID,
    firstdiff,
    host_key,
    key_prefix,
    moves_to,
    moving_range_after,
    moving_ranges,
    prefix_moves,
)


def test_firstdiff_and_the_moving_bit() -> None:
    assert firstdiff(5, 5) == -1
    assert firstdiff(0b1000, 0b1011) == 1
    me, n = 0b1000, 0b1011
    # Closer to n than to me: bit 1 equals n's.
    assert [k for k in range(16) if moves_to(k, me, n)] == [k for k in range(16) if (k >> 1) & 1]


def test_key_prefix_is_signed_64_bit_and_keeps_order() -> None:
    assert key_prefix(0) == -(1 << 63)
    assert key_prefix(MAX_ID) == (1 << 63) - 1
    keys = sorted(host_key(f"h{i}.example") for i in range(500))
    assert [key_prefix(k) for k in keys] == sorted(key_prefix(k) for k in keys)


def _scan(me: int, n: int, keys: list[int], shift: int, bits: int) -> tuple[set[int], int]:
    """The skip-scan over a sorted list standing for the index: the keys it reads and checks."""
    vals = sorted({k >> shift for k in keys})
    seeks = 0

    def seek(v: int) -> int | None:
        nonlocal seeks
        seeks += 1
        i = bisect_left(vals, v)
        return vals[i] if i < len(vals) else None

    found = set()
    for lo, hi in moving_ranges(me, n, seek, shift=shift, bits=bits):
        assert lo in vals  # a range starts at a present value
        found |= {k for k in keys if lo <= k >> shift <= hi and moves_to(k, me, n)}
    return found, seeks


small = st.integers(0, (1 << 12) - 1)


@settings(max_examples=400, deadline=None)
@given(me=small, n=small, keys=st.lists(small, max_size=60), shift=st.integers(0, 12))
def test_skip_scan_finds_exactly_the_movers_small_space(me: int, n: int, keys: list[int], shift: int) -> None:
    found, _ = _scan(me, n, keys, shift, 12)
    assert found == {k for k in keys if k ^ n < k ^ me}


@settings(max_examples=300, deadline=None)
@given(me=small, n=small, x=small, shift=st.integers(0, 12))
def test_moving_range_after_is_the_first_moving_range(me: int, n: int, x: int, shift: int) -> None:
    bits = 12
    vmax = (1 << (bits - shift)) - 1
    r = moving_range_after(me, n, x, shift=shift, bits=bits)
    # Values v that can hold a mover: some key with prefix v moves.
    can = [v for v in range(x, vmax + 1) if any(moves_to((v << shift) | low, me, n) for low in range(1 << shift))]
    if not can:
        assert r is None
        return
    assert r is not None
    lo, hi = r
    assert lo == can[0]
    assert all(v in can for v in range(lo, hi + 1))
    assert hi == vmax or hi + 1 not in can
    if firstdiff(me, n) >= shift:  # exact: every key under the range moves
        assert all(moves_to((v << shift) | low, me, n) for v in (lo, hi) for low in (0, (1 << shift) - 1))


ids = st.integers(0, MAX_ID)


@settings(max_examples=200, deadline=None)
@given(me=ids, data=st.data(), keys=st.lists(ids, max_size=40), near=st.integers(0, ID_BITS))
def test_skip_scan_full_ids_through_the_64_bit_prefix(me: int, data: st.DataObject, keys: list[int], near: int) -> None:
    # A newcomer sharing `near` top bits with me, and keys near both, so the moving bit lands
    # above, at and below the prefix's last bit (96).
    n = me ^ data.draw(st.integers(0, (1 << (ID_BITS - near)) - 1)) if near < ID_BITS else me
    keys = keys + [me ^ data.draw(st.integers(0, (1 << b) - 1)) for b in (100, 97, 96, 95, 40)]
    found, _ = _scan(me, n, keys, KEY_PREFIX_SHIFT, ID_BITS)
    assert found == {k for k in keys if k ^ n < k ^ me}


def test_skip_scan_reads_only_the_moving_blocks() -> None:
    # 1,000 keys in one node's neighbourhood; a newcomer splitting it: seeks stay a handful.
    me = host_key("me")
    keys = [me ^ (host_key(f"k{i}") >> 10) for i in range(1000)]
    n = me ^ (1 << 148) ^ 12345
    found, seeks = _scan(me, n, keys, KEY_PREFIX_SHIFT, ID_BITS)
    assert found == {k for k in keys if moves_to(k, me, n)}
    assert 0 < len(found) < 1000
    assert seeks <= 4


def test_existing_functions_unchanged() -> None:
    assert xorspace.firstdiff(0, 1 << 159) == 159
    assert xorspace.distance(3, 5) == 6


@settings(max_examples=300, deadline=None)
@given(me=small, n=small, k=small, shift=st.integers(0, 12))
def test_prefix_moves_agrees_with_the_keys(me: int, n: int, k: int, shift: int) -> None:
    got = prefix_moves(k >> shift, me, n, shift=shift)
    under = {moves_to(((k >> shift) << shift) | low, me, n) for low in range(1 << shift)}
    if got is None:
        assert firstdiff(me, n) < shift
    else:
        assert under == {got}
