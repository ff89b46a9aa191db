"""The new-URL path, us per new URL: a page's links from the dispatcher to the frontier through the
agent's real objects (the page steps' Discovery.discover: recent filter, scope and trap checks; RoutingService
and Router.submit: every host owned here; Intake.accept_local: budgets, seen set; Frontier.add),
with the group commits the commit log makes (frontier, seen set, outbox) every `--commit` pages.
As in the first slice of a crawl, each page is a URL popped from its host's queue (and marked
done after its links), so the frontier pages in from disk as hosts drain their heads. Each page of
a lab-like web (`--hosts` sites, round robin) yields `--new` URLs never seen and `--nav`
navigation links its site repeats on every page (the recent filter drops them after the first).
CPU per new URL (process time, the pops and done marks included), best of `--rounds` rounds, each
on a fresh temp dir; the agent's GC settings.

    python bench/parts/new_urls.py [--pages 20000] [--new 10] [--nav 20] [--rounds 5] [--profile F]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.crawl.dispatcher import Dispatcher  # noqa: E402
from agent.crawl.scope import Scope  # noqa: E402
from agent.placement.hostcache import HostCache  # noqa: E402
from agent.placement.port import HostRoute  # noqa: E402
from agent.routing.intake import Intake  # noqa: E402
from agent.routing.router import Router  # noqa: E402
from agent.routing.service import RoutingService  # noqa: E402
from agent.settings import AgentSettings, ScopeSettings  # noqa: E402
from agent.state.frontier import Frontier, Item  # noqa: E402
from agent.state.outbox import Outbox  # noqa: E402
from agent.state.seen import SeenSet  # noqa: E402
from agent.waker import HostSignal  # noqa: E402
from wancrawl.domains import registered_domain  # noqa: E402
from wancrawl.hostres import HostResolver  # noqa: E402

SECTIONS = ("help", "news", "about", "shop", "blog", "docs", "team", "faq")


def host(h: int) -> str:
    return f"www.s{h:04d}.cernet-beijing.lab"


def host_of_page(p: int, hosts: int, burst: int) -> int:
    """Pages come `burst` at a time from one host (the agent fetches up to max_per_host = 8 of a
    host at once), hosts round robin."""
    return (p // burst) % hosts


def pages(n: int, hosts: int, new: int, nav: int, burst: int) -> list[list[str]]:
    """The links of n pages: `new` URLs of the page's host seen nowhere before, then the host's
    `nav` navigation links."""
    out = []
    for p in range(n):
        h = host(host_of_page(p, hosts, burst))
        k = p
        links = [f"http://{h}/{SECTIONS[j % len(SECTIONS)]}/page-{k}-{j}.html" for j in range(new)]
        links += [f"http://{h}/{SECTIONS[j % len(SECTIONS)]}/{j}/" for j in range(nav)]
        out.append(links)
    return out


def one_round(work: list[list[str]], hosts: int, burst: int, commit_every: int, profile: cProfile.Profile | None) -> tuple[float, int, float]:
    """One crawl of `work`: (CPU seconds, URLs queued at the end, the longest step's CPU: a page's
    pop, links and done mark, or a group commit; what one event-loop callback of the agent does)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        names = [host(h) for h in range(hosts)]
        s = AgentSettings(agent_id="a1", scope=ScopeSettings(allowed_domains=names))
        frontier = Frontier(d / "frontier.sqlite", domain_of=registered_domain)
        seen = SeenSet(d / "seen.sqlite")
        outbox = Outbox(d / "outbox.sqlite")
        scope = Scope(s.scope)
        signal = HostSignal()
        cache = HostCache()
        for h in names:
            cache.put(HostRoute(h, (("a1", "127.0.0.1:1"),), 10**9, 0), 0.0)

        async def never(*a: object) -> None:
            raise AssertionError("not on the local path")

        intake = Intake(seen, frontier, scope, owners=never, refusing=lambda: False,  # type: ignore[arg-type]
                        wake=signal.wake, durable=never)  # type: ignore[arg-type]
        routing = RoutingService("a1", Router("a1", cache), outbox, None, None, intake.accept_local,  # type: ignore[arg-type]
                                 retry_seconds=1.0, max_pushes_in_flight=4, clock=lambda: 1.0)
        disp = Dispatcher(s, frontier, None, HostResolver({}), scope, signal, route=routing.route,  # type: ignore[arg-type]
                          finish=lambda item, cap: None, clock=lambda: 1.0)
        frontier.add([Item(f"http://{h}/", h, 0) for h in names])  # each host's seed, its first page
        frontier.flush()
        gc.collect()
        gc.freeze()  # as the agent does after start-up (agent/server.py)
        if profile is not None:
            profile.enable()
        t0 = time.process_time()
        longest = 0.0
        for n, links in enumerate(work, 1):
            t = time.thread_time()
            item = frontier.pop(names[host_of_page(n - 1, hosts, burst)])
            assert item is not None
            disp.page.links.discover(item, links)
            frontier.done(item)
            longest = max(longest, time.thread_time() - t)
            if n % commit_every == 0:
                t = time.thread_time()
                outbox.flush()
                frontier.flush()
                seen.flush()
                longest = max(longest, time.thread_time() - t)
        outbox.flush()
        frontier.flush()
        seen.flush()
        cpu = time.process_time() - t0
        if profile is not None:
            profile.disable()
        queued = len(frontier)
        frontier.close()
        seen.close()
        outbox.close()
        return cpu, queued, longest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--new", type=int, default=10, help="new URLs per page")
    ap.add_argument("--nav", type=int, default=20, help="navigation links per page (the same on every page of a site)")
    ap.add_argument("--burst", type=int, default=8, help="pages of one host in a row")
    ap.add_argument("--commit", type=int, default=100, help="pages between group commits")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", help="write a cProfile of one more round here")
    args = ap.parse_args()
    gc.set_threshold(7000, 10, 10)  # the agent's (agent/server.py serve)
    work = pages(args.pages, args.hosts, args.new, args.nav, args.burst)
    best = float("inf")
    queued = 0
    longest = []
    for _ in range(args.rounds):
        cpu, queued, step = one_round(work, args.hosts, args.burst, args.commit, None)
        best = min(best, cpu)
        longest.append(step)
    expect = args.hosts + args.pages * args.new + args.hosts * args.nav - args.pages  # seeds, links, less the pages done
    if queued != expect:
        print(f"queued {queued:,}, expected {expect:,}: the path dropped or doubled URLs", file=sys.stderr)
        return 1
    print(f"{args.pages:,} pages x ({args.new} new + {args.nav} nav links) over {args.hosts} hosts, commit every {args.commit} pages "
          f"(Python {sys.version.split()[0]}): {queued:,} queued")
    print(f"  best of {args.rounds}: {best:.3f} s CPU = {best / (args.pages * args.new + args.hosts * args.nav) * 1e6:.2f} us per new URL "
          f"({best / args.pages * 1e6:.0f} us per page)")
    print(f"  longest step (a page's links, or a group commit): {max(longest) * 1e3:.1f} ms CPU "
          f"(median of the rounds' {sorted(longest)[len(longest) // 2] * 1e3:.1f})")
    if args.profile:
        prof = cProfile.Profile()
        one_round(work, args.hosts, args.burst, args.commit, prof)
        prof.dump_stats(args.profile)
        print(f"  profile of one more round: {args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
