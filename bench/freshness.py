"""Freshness of a continuous crawl on the lab's changing web (issue 26): uniform, adaptive and
change-rate-optimal revisiting at the same page budget, against the lab's truth.

    python bench/freshness.py                  # 3 policies x 30 lab days (~1-2 minutes); figures and the ratio
    python bench/freshness.py --plot docs/img  # also freshness(t) and age(t): docs/img/freshness.png
    python bench/freshness.py --json

What runs: the agent's own revisit schedule (agent/state/frontier.py with agent/state/revisit.py,
the code a `[revisit]` agent runs) against the lab's own responses (lab/web.py: versions, ETag,
Last-Modified, 304), in lab time, without sockets: a fetcher takes one due revisit every
1 / budget seconds (the page budget per second; hosts in turn, the same budget each), sends
If-None-Match / If-Modified-Since from the last capture, and hands the answer to the frontier as
the dispatcher does. So the policies differ only in which pages they spend the budget on.

Pages: --sites lab sites, the first --pages of each; a share --change-ratio of them change as
Poisson processes (means drawn around 1 h, 1 day and 1 week of lab time), the rest never change.
The budget is --revisit-hours: every page once per that many hours on average. (a) uniform:
fixed interval = pages / budget. (b) adaptive (Nutch): starts there, x1.4 after an unchanged
revisit, x0.8 after a changed one, within [--min-interval, 30 days]. (c) optimal (Cho and
Garcia-Molina): rates estimated from each page's revisits, intervals that maximise the host's
summed freshness under its budget per day.

Measured after a warm-up (--warmup days), every lab 15 minutes: freshness = share of pages
whose archived version is the one current then (lab truth: Web.version_at); age = time since
the first change the archive missed (0 when fresh). Printed beside the analytic values for the
true rates (Cho and Garcia-Molina's F(lambda, f)): uniform, proportional to the change rate (their
counter-example: worse than uniform) and the optimum with the rates known; bytes the 304s saved;
the budget each policy used. The last line: `freshness optimal / uniform: R`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.settings import RevisitSettings  # noqa: E402
from agent.state.frontier import Frontier, Item  # noqa: E402
from agent.state.revisit import DAY, Visit, conditional_headers, freshness, optimal_frequencies, validators  # noqa: E402
from lab.testing import small_topology  # noqa: E402
from lab.web import Web  # noqa: E402

SAMPLE = 900.0  # lab seconds between freshness samples


@dataclass
class Result:
    policy: str
    freshness: float = 0.0   # mean over the samples after the warm-up
    age_hours: float = 0.0   # mean age of a page (hours)
    fetches: int = 0         # revisits + first visits
    not_modified: int = 0
    bytes_fetched: int = 0
    bytes_saved: int = 0     # payload bytes the 304s did not send
    budget_used: float = 0.0  # fetches / (budget x time)
    series: list[tuple[float, float, float]] = field(default_factory=list)  # (day, freshness, age h)


def pages_of(web: Web, sites: int, per_site: int) -> list[tuple]:
    out = []
    for s in web.topology.normal_sites:
        if web.pages(s) < per_site:
            continue
        out += [(s, i, web.url(s, web.page_path(s, i)), s.host) for i in range(per_site)]
        if len(out) >= sites * per_site:
            break
    return out


def run(policy: str, web: Web, pages: list[tuple], args: argparse.Namespace, tmp: Path) -> Result:
    hosts = sorted({h for *_, h in pages})
    n = len(pages)
    budget = n / (args.revisit_hours * 3600.0)  # pages per lab second, all hosts
    per_host_day = budget / len(hosts) * DAY
    uniform = n / budget
    s = RevisitSettings(enabled=True, policy=policy, interval=uniform, min_interval=args.min_interval,
                        max_interval=30 * DAY, pages_per_host_day=per_host_day, discovery_share=0.5)
    t = [0.0]
    f = Frontier(tmp / f"{policy}.sqlite", revisit=s, clock=lambda: t[0])
    f.add([Item(url, host) for _, _, url, host in pages])
    site_of = {url: (site, i) for site, i, url, _ in pages}
    archive: dict[str, int] = {}  # url -> version archived
    res = Result(policy)
    step = 1.0 / budget
    end = args.days * DAY
    warm = args.warmup * DAY
    next_sample = warm
    turn = 0
    fr_sum = age_sum = 0.0
    samples = 0
    while t[0] < end:
        for k in range(len(hosts)):
            host = hosts[(turn + k) % len(hosts)]
            it = f.pop(host, t[0])
            if it is not None:
                turn = (turn + k + 1) % len(hosts)
                break
        else:
            it = None
        if it is not None:
            site, i = site_of[it.url]
            hdrs = conditional_headers(it.revisit) if it.revisit is not None and args.conditional else {}
            path = "/" + it.url.split("/", 3)[3] if it.url.count("/") >= 3 else "/"
            r = web.respond(site.host, path, site=site, now=t[0], if_none_match=hdrs.get("If-None-Match"),
                            if_modified_since=hdrs.get("If-Modified-Since"))
            etag, modified = validators(r.headers)
            res.fetches += 1
            if r.status == 304:
                res.not_modified += 1
                res.bytes_saved += it.revisit.length if it.revisit is not None else 0
                digest = it.revisit.digest if it.revisit is not None else ""
            else:
                archive[it.url] = int(etag.strip('"').rsplit("-", 1)[1])
                res.bytes_fetched += len(r.body)
                digest = "sha1:" + hashlib.sha1(r.body).hexdigest()
            it.visit = Visit(t[0], r.status, digest, etag, modified, len(r.body))
            f.done(it)
            if res.fetches % 200 == 0:
                f.flush()
        t[0] += step
        while t[0] >= next_sample and next_sample < end:
            fresh = 0
            age = 0.0
            for site, i, url, _ in pages:
                v = archive.get(url)
                now_v = web.version_at(site, i, next_sample)
                if v == now_v:
                    fresh += 1
                elif v is not None:
                    age += next_sample - web.changed_at(site, i, v + 1)
                else:
                    age += next_sample
            fr, ag = fresh / n, age / n / 3600.0
            res.series.append((next_sample / DAY, fr, ag))
            fr_sum += fr
            age_sum += ag
            samples += 1
            next_sample += SAMPLE
    f.close()
    res.freshness = fr_sum / max(1, samples)
    res.age_hours = age_sum / max(1, samples)
    res.budget_used = res.fetches / (budget * end)
    return res


def analytic(web: Web, pages: list[tuple], args: argparse.Namespace) -> dict[str, float]:
    """Cho and Garcia-Molina's expected freshness for the TRUE rates: uniform, proportional, optimal."""
    hosts = sorted({h for *_, h in pages})
    n = len(pages)
    budget = n / (args.revisit_hours * 3600.0)
    out = {"uniform": 0.0, "proportional": 0.0, "optimal": 0.0}
    for h in hosts:
        rates = [web.change_rate(site, i) for site, i, _, host in pages if host == h]
        b = budget / len(hosts)
        out["uniform"] += sum(freshness(r, b / len(rates)) for r in rates)
        total = sum(rates)
        out["proportional"] += sum(freshness(r, b * r / total) if total else 1.0 for r in rates)
        freqs, _ = optimal_frequencies(rates, b)
        out["optimal"] += sum(freshness(r, x) for r, x in zip(rates, freqs))
    return {k: v / n for k, v in out.items()}


def plot(results: list[Result], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        days = [d for d, _, _ in r.series]
        axes[0].plot(days, [x for _, x, _ in r.series], label=f"{r.policy} (mean {r.freshness:.3f})", linewidth=1)
        axes[1].plot(days, [a for _, _, a in r.series], label=f"{r.policy} (mean {r.age_hours:.1f} h)", linewidth=1)
    axes[0].set_ylabel("freshness (share of pages up to date)")
    axes[1].set_ylabel("age (hours since the first missed change)")
    for ax in axes:
        ax.set_xlabel("lab days")
        ax.legend(fontsize=8)
    fig.suptitle("revisit policies at the same page budget, against the lab's truth (bench/freshness.py)")
    fig.tight_layout()
    path = out / "freshness.png"
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sites", type=int, default=6)
    p.add_argument("--pages", type=int, default=50, help="pages per site")
    p.add_argument("--change-ratio", type=float, default=0.6)
    p.add_argument("--revisit-hours", type=float, default=12.0, help="the budget: every page once per this many hours on average")
    p.add_argument("--min-interval", type=float, default=900.0, help="shortest revisit interval (lab s)")
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=5.0, help="lab days before freshness is measured")
    p.add_argument("--no-conditional", dest="conditional", action="store_false")
    p.add_argument("--plot", type=Path, help="directory for freshness.png")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    web = Web(small_topology(change_ratio=args.change_ratio, change_means=[3600.0, DAY, 7 * DAY], pages_max=400,
                             pages_min=args.pages), args.seed)
    pages = pages_of(web, args.sites, args.pages)
    changing = sum(web.change_rate(s, i) > 0 for s, i, _, _ in pages)
    with tempfile.TemporaryDirectory() as d:
        results = [run(pol, web, pages, args, Path(d)) for pol in ("fixed", "adaptive", "optimal")]
    results[0].policy = "uniform"
    ref = analytic(web, pages, args)
    if args.json:
        print(json.dumps({"results": [{k: v for k, v in asdict(r).items() if k != "series"} for r in results],
                          "analytic": ref}, indent=2))
    print(f"{len(pages)} pages on {len({h for *_, h in pages})} lab sites, {changing} changing (Poisson, means ~1 h / 1 day / "
          f"1 week), budget: each page once per {args.revisit_hours:g} h on average; {args.days:g} lab days, measured after "
          f"{args.warmup:g}")
    print(f"{'policy':10} {'freshness':>9} {'age (h)':>8} {'fetches':>8} {'budget used':>11} {'304s':>6} {'MB fetched':>10} "
          f"{'MB saved':>8}")
    for r in results:
        print(f"{r.policy:10} {r.freshness:9.3f} {r.age_hours:8.1f} {r.fetches:8d} {r.budget_used:11.2f} {r.not_modified:6d} "
              f"{r.bytes_fetched / 1e6:10.1f} {r.bytes_saved / 1e6:8.1f}")
    print(f"analytic (true rates, Cho and Garcia-Molina's F): uniform {ref['uniform']:.3f}, proportional "
          f"{ref['proportional']:.3f}, optimal {ref['optimal']:.3f}")
    saved = sum(r.bytes_saved for r in results)
    total = saved + sum(r.bytes_fetched for r in results)
    print(f"conditional requests: {sum(r.not_modified for r in results)} answers 304, {saved / 1e6:.1f} MB of "
          f"{total / 1e6:.1f} MB not sent ({saved / max(1, total):.0%})")
    if args.plot:
        print(f"plot: {plot(results, args.plot)}")
    print(f"freshness optimal / uniform: {results[2].freshness / results[0].freshness:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
