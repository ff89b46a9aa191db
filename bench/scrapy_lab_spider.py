"""Scrapy's side of bench/agent_throughput.py: crawl the lab's normal sites, report figures as JSON.

Runs under the benchmark's own venv (bench/.venv-scrapy, made by agent_throughput.py), never
the project's: Scrapy is not a wancrawl dependency. Standalone use:

    bench/.venv-scrapy/bin/python bench/scrapy_lab_spider.py --hosts-file HOSTS \\
        --seeds-file SEEDS --concurrency 64 --per-host 8 --out result.json

The lab's names resolve only through its hosts file, so a tiny Twisted resolver answers from
that file (TWISTED_DNS_RESOLVER); /etc/hosts is not touched. Wall and CPU time run from
spider_opened to the last response received, so Scrapy's 5 s idle heartbeat and its shutdown
are not counted; time.process_time() covers every thread of the process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

def read_hosts(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        for name in parts[1:]:
            out.setdefault(name.lower(), parts[0])
    return out


@implementer(IResolverSimple)
class HostsFileResolver:
    """Answers from the lab's hosts file only; any other name fails (no traffic leaves 127/8)."""

    def __init__(self, reactor, hosts: dict[str, str]):
        self.reactor = reactor
        self.hosts = hosts

    @classmethod
    def from_crawler(cls, crawler, reactor):
        return cls(reactor, read_hosts(crawler.settings["LAB_HOSTS_FILE"]))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout=()):
        ip = self.hosts.get(name.lower().rstrip("."))
        if ip is None:
            return defer.fail(DNSLookupError(f"{name}: not in the lab's hosts file"))
        return defer.succeed(ip)


class LabSpider(scrapy.Spider):
    name = "lab"

    def __init__(self, seeds: list[str], allowed: list[str], follow: str = "css", **kw):
        super().__init__(**kw)
        self.follow = follow
        if follow == "linkextractor":
            from scrapy.linkextractors import LinkExtractor

            self.extractor = LinkExtractor()  # allow_domains ignores ports: OffsiteMiddleware scopes instead
        self.start_urls = seeds
        self.allowed_domains = allowed
        self.parsed = 0
        self.t0 = self.c0 = self.t_last = self.c_last = 0.0

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.opened, signal=signals.spider_opened)
        crawler.signals.connect(spider.received, signal=signals.response_received)
        return spider

    def opened(self, spider):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def received(self, response, request, spider):
        self.t_last, self.c_last = time.perf_counter(), time.process_time()

    def parse(self, response):
        self.parsed += 1
        if not isinstance(response, scrapy.http.HtmlResponse):
            return
        if self.follow == "linkextractor":
            for link in self.extractor.extract_links(response):
                yield scrapy.Request(link.url, callback=self.parse)
            return
        hrefs = response.css("a::attr(href)").getall()
        if self.follow == "css-unique":  # one Request per distinct URL of the page
            urls = dict.fromkeys(response.urljoin(h.strip()) for h in hrefs)
        else:
            urls = (response.urljoin(h.strip()) for h in hrefs)
        for url in urls:
            if url.startswith(("http://", "https://")):
                yield scrapy.Request(url, callback=self.parse)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts-file", required=True)
    ap.add_argument("--seeds-file", required=True, help="one root URL a line")
    ap.add_argument("--allowed", help="file of allowed hosts, one a line (default: the seeds' hosts)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--pages-limit", type=int, default=0)
    ap.add_argument("--follow", choices=("css", "css-unique", "linkextractor"), default="css",
                    help="css: every a[href] (default); css-unique: deduplicated within the page; linkextractor: "
                    "scrapy.linkextractors.LinkExtractor() (OffsiteMiddleware keeps the allowed domains)")
    ap.add_argument("--reactor", help="TWISTED_REACTOR (default: Scrapy's, the asyncio reactor)")
    ap.add_argument("--out", required=True, help="JSON result file")
    args = ap.parse_args()

    # Scrapy loads the resolver by dotted path: make this file importable under its own name
    # (it may run as __main__, or under cProfile).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    seeds = [u.strip() for u in Path(args.seeds_file).read_text().splitlines() if u.strip()]
    if args.allowed:
        allowed = [h.strip() for h in Path(args.allowed).read_text().splitlines() if h.strip()]
    else:
        allowed = sorted({u.split("/")[2].split(":")[0] for u in seeds})
    settings = {
        "ROBOTSTXT_OBEY": False,
        "DOWNLOAD_DELAY": 0,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host,
        "AUTOTHROTTLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "HTTPCACHE_ENABLED": False,
        "DEPTH_LIMIT": 0,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "USER_AGENT": "scrapy-lab-bench",
        "TWISTED_DNS_RESOLVER": "scrapy_lab_spider.HostsFileResolver",
        "LAB_HOSTS_FILE": args.hosts_file,
        "DOWNLOAD_TIMEOUT": 30,
        "CLOSESPIDER_PAGECOUNT": args.pages_limit,
    }
    if args.reactor:
        settings["TWISTED_REACTOR"] = args.reactor
    proc = CrawlerProcess(settings)
    crawler = proc.create_crawler(LabSpider)
    proc.crawl(crawler, seeds=seeds, allowed=allowed, follow=args.follow)
    proc.start()
    from twisted.internet import reactor

    sp, stats = crawler.spider, crawler.stats.get_stats()
    result = {
        "pages": stats.get("response_received_count", 0),
        "parsed": sp.parsed,
        "status_200": stats.get("downloader/response_status_count/200", 0),
        "wall": sp.t_last - sp.t0,
        "cpu": sp.c_last - sp.c0,
        "requests": stats.get("downloader/request_count", 0),
        "dupefilter_filtered": stats.get("dupefilter/filtered", 0),
        "offsite_filtered": stats.get("offsite/filtered", 0),
        "errors": {k: v for k, v in stats.items() if "exception" in k or k.startswith("log_count/ERROR")},
        "scrapy": scrapy.__version__,
        "reactor": type(reactor).__name__,
        "finish_reason": stats.get("finish_reason"),
        "follow": args.follow,
    }
    Path(args.out).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
