"""The pure-Python placements as they were before the NumPy scores (issue 24): the reference
that tests/test_partition_vectorized.py holds the vectorised ones to, ranking for ranking.

Copied from consultant/partition/{base,rendezvous,geo,asn}.py at 51b9cf5; do not "improve".
"""

from __future__ import annotations

import hashlib
import heapq
import math

from wancrawl.geo import great_circle_km

MASK64 = (1 << 64) - 1
_TWO64 = float(1 << 64)


def key64(text, salt=""):
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, person=b"wancrawl", salt=salt.encode()[:16]).digest(), "big")


def mix64(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def hrw_scores(host_key, agent_keys):
    return [mix64(host_key ^ a) for a in agent_keys]


class HashRef:
    def __init__(self, agents, salt=""):
        self.agents = list(agents)
        self.salt = salt
        self.keys = [key64(a.agent_id, salt) for a in self.agents]
        self._tiebreak = [a.agent_id for a in self.agents]

    def scores(self, site):
        return hrw_scores(key64(site.host, self.salt), self.keys)

    def rank(self, site, k):
        s = self.scores(site)
        if k == 1 and s:
            return [max(range(len(s)), key=s.__getitem__)]
        return heapq.nlargest(k, range(len(s)), key=lambda i: (s[i], self._tiebreak[i]))


class WeightedRef(HashRef):
    def __init__(self, agents, salt, weights):
        super().__init__(agents, salt)
        self.weights = list(weights)

    def wscores(self, site):
        raw = self.scores(site)
        return [-w / math.log((x + 0.5) / _TWO64) for x, w in zip(raw, self.weights)]

    def rank(self, site, k):
        s = self.wscores(site)
        return heapq.nlargest(k, range(len(s)), key=lambda i: (s[i], self._tiebreak[i]))


class GeoRef:
    def __init__(self, agents, tie_km):
        self.agents = list(agents)
        self.tie_km = tie_km
        self.hash = HashRef(agents, "")

    def _keys(self, site):
        h = self.hash.scores(site)
        if site.lat is None or site.lon is None:
            return [(0.0, -x) for x in h]
        d = [great_circle_km(site.lat, site.lon, a.lat, a.lon) if a.lat is not None and a.lon is not None else math.inf
             for a in self.agents]
        tie = self.tie_km
        buckets = [math.floor(x / tie) if tie > 0 and x != math.inf else x for x in d]
        return [(b, -x) for b, x in zip(buckets, h)]

    def rank(self, site, k):
        keys = self._keys(site)
        return sorted(range(len(keys)), key=keys.__getitem__)[:k]


class AsnRef:
    def __init__(self, agents, fallback):
        self.agents = list(agents)
        self.fallback = fallback
        self.by_isp = {}
        for i, a in enumerate(self.agents):
            if a.isp:
                self.by_isp.setdefault(a.isp, set()).add(i)

    def rank(self, site, k):
        local = self.by_isp.get(site.isp) if site.isp else None
        if not local:
            return self.fallback.rank(site, k)
        full = self.fallback.rank(site, len(self.agents))
        return ([i for i in full if i in local] + [i for i in full if i not in local])[:k]
