"""Who runs a crawl: the contact every User-Agent carries, and its one honesty rule.

A crawler that fetches from the real web must say where site owners can reach whoever runs it;
there is no honest default. `manager crawl --contact` and `agent run --contact` (both also
WANCRAWL_CONTACT, as the compose agents take it) check it here, so the rule is one.
"""

from __future__ import annotations

from wancrawl.errors import ConfigError

USER_AGENT = "wancrawl/0.1 (+{contact})"
ENV = "WANCRAWL_CONTACT"
CONTACT_HELP = ("URL (or mailto:) where site owners can reach whoever runs this crawl; it goes into the "
                "User-Agent as 'wancrawl/0.1 (+CONTACT)' (env WANCRAWL_CONTACT). Required: there is no honest default")
EXAMPLE = "e.g. --contact https://example.org/about-my-crawl or --contact mailto:you@example.org"


def user_agent(contact: str) -> str:
    """The User-Agent for `contact`; ConfigError when it is not one URL or e-mail address."""
    c = contact.strip()
    if not c or any(ch in c for ch in "()\r\n") or " " in c:
        raise ConfigError(f"--contact {contact!r}: one URL or mailto: address, without spaces or parentheses")
    if not (c.startswith(("http://", "https://", "mailto:")) or "@" in c):
        raise ConfigError(f"--contact {contact!r}: give an http(s) URL or an e-mail address (mailto:you@example.org)")
    return USER_AGENT.format(contact=c)


def required(contact: str | None, flag: str = "--contact") -> str:
    """The User-Agent for a contact that must be given: ConfigError naming the flag and the variable when blank."""
    if not (contact or "").strip():
        raise ConfigError(f"give {flag} URL (or set {ENV}): " + CONTACT_HELP.split("; ")[0] + "; " + EXAMPLE)
    return user_agent(contact or "")
