"""Registered domains ("example.co.uk" of "a.b.example.co.uk") from the public suffix list.

The list is the snapshot bundled with the `publicsuffixlist` package (updated with each of its
releases): nothing is downloaded at run time. Both sections count (ICANN and private: each
`x.github.io` or `x.blogspot.com` is its own registered domain), and a name under a suffix the
list does not know is read with the list's default rule "*" (its last label is the suffix:
`www.s0001.telecom-beijing.lab` is under `telecom-beijing.lab`).
"""

from __future__ import annotations

from functools import lru_cache

from publicsuffixlist import PublicSuffixList

from wancrawl.urls import ip_literal

_PSL: PublicSuffixList | None = None  # parsed on first use (~0.2 s): processes that never ask pay nothing


@lru_cache(maxsize=1 << 16)
def registered_domain(host: str) -> str:
    """The registered domain of a canonical host: the public suffix and one label more. An IP
    address, or a name that is itself a public suffix (or has one label), is its own domain.
    About 9 us a name uncached (hence the cache: the same hosts come up again and again)."""
    global _PSL
    if ip_literal(host) is not None:
        return host
    if _PSL is None:
        _PSL = PublicSuffixList(accept_unknown=True)
    return _PSL.privatesuffix(host) or host
