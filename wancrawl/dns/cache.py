"""The resolver's cache (pure: no I/O, the clock is an argument): answers kept for their TTL
bounded by [min_ttl, max_ttl], definitive failures (NXDOMAIN, no address) for `negative_ttl`,
temporary ones (timeout, SERVFAIL) for `temporary_ttl`, and at most `max_entries` names.

The two kinds of failure are kept apart because a crawler acts on them differently: a name
that does not exist is given up at once, a timeout is asked again (wancrawl/hostres.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from wancrawl.dns.answers import Lookup


@dataclass(frozen=True, slots=True)
class Entry:
    ip: str | None
    expires: float
    why: str | None  # None when ip is set


class DnsCache:
    """name -> Entry. Invariant: every entry has ip xor why; `expires` is the put time plus the
    entry's kept time (`keep`); entries are in insertion order, so when `max_entries` is reached
    the oldest put goes first (an expired entry is dropped when read)."""

    def __init__(self, *, default_ttl: float = 300.0, min_ttl: float = 5.0, max_ttl: float = 3600.0,
                 negative_ttl: float = 60.0, temporary_ttl: float = 5.0, max_entries: int = 1_000_000,
                 definitive: frozenset[str] = frozenset()):
        if not 0 <= min_ttl <= max_ttl:
            raise ValueError(f"min_ttl {min_ttl} and max_ttl {max_ttl}: need 0 <= min_ttl <= max_ttl")
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.default_ttl, self.min_ttl, self.max_ttl = default_ttl, min_ttl, max_ttl
        self.negative_ttl, self.temporary_ttl = negative_ttl, temporary_ttl
        self.max_entries = max_entries
        self.definitive = definitive
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, answer: Lookup) -> float:
        """How long an answer is kept: its TTL (the default when it has none) within
        [min_ttl, max_ttl]; a failure: negative_ttl when definitive, else temporary_ttl."""
        if answer.ip is None:
            return self.negative_ttl if answer.why in self.definitive else self.temporary_ttl
        ttl = self.default_ttl if answer.ttl is None else answer.ttl
        return min(max(ttl, self.min_ttl), self.max_ttl)

    def put(self, name: str, answer: Lookup, now: float) -> Entry:
        e = Entry(answer.ip, now + self.keep(answer), None if answer.ip is not None else (answer.why or "unknown"))
        self._entries.pop(name, None)  # re-inserted last: the newest put
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[name] = e
        return e

    def get(self, name: str, now: float) -> Entry | None:
        """The live entry, or None (absent, or expired: then dropped)."""
        e = self._entries.get(name)
        if e is not None and e.expires > now:
            return e
        if e is not None:
            del self._entries[name]
        return None

    def peek(self, name: str, now: float) -> Entry | None:
        """As get, without dropping (the failure reason of a name)."""
        e = self._entries.get(name)
        return e if e is not None and e.expires > now else None
