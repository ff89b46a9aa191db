"""The consultant's application layer: membership writes, epoch sync, resolve and explain."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from consultant.balance import Balancer, Move, Policy
from consultant.capacity.book import CapacityBook
from consultant.directory import Directory, Ranked
from consultant.locator import SiteLocator
from consultant.membership import DEAD, AgentRecord, Snapshot
from consultant.partition import Partitioner, Site, create
from consultant.settings import ConsultantSettings
from consultant.sitedb import AsnDB, CityDB, shipped_city_db
from consultant.store import Store
from consultant.whereabouts import Evidence, Place, settle
from wancrawl.checks import shown
from wancrawl.errors import ConfigError, FailedPrecondition, InvalidArgument, PermissionDenied
from wancrawl.hostres import DEFINITIVE, TEMPORARY, make_resolver, parse_hosts_file
from wancrawl.stats import Counters
from wancrawl.urls import canonical_host, ip_literal

log = logging.getLogger("consultant")
_MAX_LOGGED_REFUSALS = 10_000

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")


@dataclass
class HostResult:
    host: str
    agents: tuple[int, ...]
    error: str = ""


@dataclass
class Resolution:
    epoch: int
    directory: Directory
    results: list[HostResult]


@dataclass
class Explanation:
    host: str
    site: Site
    strategy: str
    epoch: int
    ranked: list[Ranked]
    override_agent: str
    notes: list[str]
    ttl: int


def build_partitioner(settings: ConsultantSettings) -> Partitioner:
    return create(settings.strategy, settings.strategies)


# The site DBs a strategy may need: their files decide where a site is, hence who owns it.
_DB_NEEDS = frozenset({"geo", "asn"})


def strategy_fingerprint(settings: ConsultantSettings, partitioner: Partitioner) -> str:
    """Everything that decides who owns a host besides membership; a change bumps the epoch."""
    parts = {**partitioner.fingerprint(), "preference_length": settings.preference_length}
    if partitioner.needs & _DB_NEEDS:
        parts["databases"] = asdict(settings.databases)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16] + ":" + settings.strategy


def open_databases(settings: ConsultantSettings, needs: frozenset[str]) -> tuple[CityDB | None, AsnDB | None]:
    """Open the City and ASN DBs. A DB the strategy needs must open (ConfigError names the
    file and key); one it does not need is used when it opens, for Explain and locations."""
    city = asn = None
    try:
        city = CityDB(settings.databases.city_db or shipped_city_db())
    except ConfigError as exc:
        if "geo" in needs:
            raise ConfigError(f"strategy {settings.strategy!r} needs a City database: {exc}") from None
        log.warning("no City DB (%s); Explain and agent locations will lack cities", exc)
    if settings.databases.asn_db or settings.databases.pyasn_file or "asn" in needs:
        try:
            asn = AsnDB(settings.databases.asn_db, settings.databases.pyasn_file)
        except ConfigError as exc:
            if "asn" in needs:
                raise ConfigError(f"strategy {settings.strategy!r} needs an ASN database: {exc}") from None
            log.warning("ASN DB unusable (%s)", exc)
    return city, asn


def validate_agent_id(agent_id: str) -> str:
    if not _AGENT_ID.match(agent_id or ""):
        raise InvalidArgument(
            f"agent_id {shown(agent_id)} is invalid: 1-200 characters of letters, digits and ._:@- starting with a letter or digit"
        )
    return agent_id


def validate_address(address: str) -> str:
    host, sep, port = (address or "").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"address {shown(address)} is invalid: expected host:port")
    try:
        canonical_host(host)
    except InvalidArgument as exc:
        raise InvalidArgument(f"address {shown(address)}: {exc}") from None
    return address


@dataclass(slots=True)
class ServiceCounters(Counters):
    """Counts since start (consultant/metrics.py HELP says what each means)."""
    resolve_requests: int = 0
    hosts_resolved: int = 0
    cache_hits: int = 0
    epoch_changes: int = 0
    registrations: int = 0
    heartbeats: int = 0
    deregistrations: int = 0
    leases_expired: int = 0


class ConsultantService:
    """Owns the store, the current Directory and the background loops.

    Invariant: `self.directory.epoch` is the newest epoch this process has read from the
    store; every write reloads it, and `_sync_loop` picks up writes made by replicas.
    """

    def __init__(self, settings: ConsultantSettings, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.clock = clock
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="consultant-db")
        self._tasks: list[asyncio.Task] = []
        self._fit_task: asyncio.Task | None = None  # the capacity model's refit under way
        self._reload_lock = asyncio.Lock()
        self.partitioner = build_partitioner(settings)
        self.city_db, self.asn_db = open_databases(settings, self.partitioner.needs)
        hosts = parse_hosts_file(settings.dns.hosts_file) if settings.dns.hosts_file else {}
        d = settings.dns
        # Geo and ASN placement need the host's IP: the same resolver and cache for every Resolve.
        self.resolver = make_resolver(d, hosts, dns=d.system_dns)
        self.locator = SiteLocator(self.resolver, self.city_db, self.asn_db, settings.isps)
        self.store = Store(settings.state_url)
        self.directory = self._directory(Snapshot(0))
        self.balancer = self._balancer(settings)
        self.capacity = CapacityBook()  # seed 003's samples and runtime model (docs/balance.md, phase 2)
        self.stats = ServiceCounters()
        self._last_sweep: float | None = None  # clock time of the last lease sweep
        self._refusals_logged: set[str] = set()  # Register refusals already logged (agents retry each heartbeat)

    @staticmethod
    def _balancer(settings: ConsultantSettings) -> Balancer:
        b = settings.balance
        policy = Policy(max_moves=b.max_moves, min_gap_seconds=b.min_gap_seconds, min_ratio=b.min_ratio, min_urls=b.min_urls)
        return Balancer(policy, b.cooldown, settings.isps, max_silence=b.max_silence or 0.4 * settings.lease_seconds)

    def _directory(self, snap: Snapshot) -> Directory:
        return Directory(
            snap, self.partitioner, preference_length=self.settings.preference_length,
            isps=self.settings.isps, cache_size=self.settings.answer_cache_size,
        )

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        # Agents get one lease period after a (re)start to heartbeat before being declared dead.
        await self._run(self.store.extend_leases, self.clock() + self.settings.lease_seconds)
        fingerprint = strategy_fingerprint(self.settings, self.partitioner)
        epoch, changed = await self._run(self.store.set_meta_bump_if_changed, "strategy", fingerprint)
        if changed:
            log.info("strategy is now %s: epoch %d", self.settings.strategy, epoch)
        await self.refresh()
        self._tasks = [asyncio.create_task(self._sweep_loop()), asyncio.create_task(self._sync_loop()),
                       asyncio.create_task(self._balance_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._fit_task is not None:
            await asyncio.gather(self._fit_task, return_exceptions=True)
        await self._run(self.store.close)
        await self.resolver.close()
        self._db.shutdown(wait=True)
        if self.city_db:
            self.city_db.close()
        if self.asn_db:
            self.asn_db.close()

    async def reload(self, settings: ConsultantSettings) -> None:
        """Swap the strategy and its options (SIGHUP). A bad config is reported and the
        running one kept."""
        partitioner = build_partitioner(settings)
        city, asn = open_databases(settings, partitioner.needs)
        if (settings.balance != self.settings.balance or settings.isps != self.settings.isps
                or settings.lease_seconds != self.settings.lease_seconds):
            self.balancer = self._balancer(settings)  # a new policy starts with no memory
        self.settings = settings
        self.partitioner = partitioner
        self.city_db, self.asn_db = city, asn
        self.locator = SiteLocator(self.resolver, city, asn, settings.isps)
        fingerprint = strategy_fingerprint(settings, partitioner)
        epoch, changed = await self._run(self.store.set_meta_bump_if_changed, "strategy", fingerprint)
        await self.refresh(force=True)
        log.info("reloaded: strategy %s, epoch %d%s", settings.strategy, epoch, "" if changed else " (unchanged)")

    async def refresh(self, force: bool = False) -> None:
        async with self._reload_lock:
            snap = await self._run(self.store.snapshot)
            if force or snap.epoch != self.directory.epoch or self.directory.partitioner is not self.partitioner:
                if snap.epoch != self.directory.epoch:
                    self.stats.epoch_changes += 1
                self.directory = self._directory(snap)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - keep sweeping after a DB hiccup
                log.exception("lease sweep failed")

    async def sweep(self) -> None:
        """Declare dead the agents whose lease ran out. A sweep that comes long after the last
        one means this consultant was not running (SIGSTOP, a stalled VM): nobody could
        heartbeat it meanwhile, so every lease is first extended by one lease period, as after a
        restart, instead of declaring every agent dead at once (issue 21: the agents came back
        one by one and hosts moved to whoever came first, then back)."""
        now = self.clock()
        last, self._last_sweep = self._last_sweep, now
        if last is not None and now - last > max(self.settings.lease_seconds / 2, 10 * self.settings.sweep_interval):
            log.warning("no lease sweep for %.1f s (this consultant was stopped?): every lease extended by %.0f s",
                        now - last, self.settings.lease_seconds)
            await self._run(self.store.extend_leases, now + self.settings.lease_seconds)
            return
        expired, epoch = await self._run(self.store.expire, now)
        if expired:
            self.stats.leases_expired += len(expired)
            log.warning("lease expired: %s are dead (epoch %d)", ", ".join(expired), epoch)
            await self.refresh()

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sync_interval)
            try:
                if await self._run(self.store.epoch) != self.directory.epoch:
                    await self.refresh()
            except Exception:  # noqa: BLE001
                log.exception("state sync failed")

    async def _balance_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.balance.interval)
            if self.partitioner.weights_from_model and not self.settings.balance.enabled:
                try:
                    await self.refit_capacity()  # the weighted strategy's shares need the model too
                except Exception:  # noqa: BLE001
                    log.exception("capacity refit failed")
            if not self.settings.balance.enabled:
                continue
            try:
                await self.balance_round()
            except Exception:  # noqa: BLE001 - a failed round is retried next interval
                log.exception("balance round failed")

    async def balance_round(self) -> list[Move]:
        """One round (docs/balance.md): plan from the agents' last load reports, write the moves
        as overrides in one epoch bump; the agents hand the hosts over on the new epoch."""
        snap = await self._run(self.store.snapshot)
        pinned = [h for h in snap.overrides if h not in snap.balanced]
        await self.refit_capacity()  # the agents' rates from the capacity model, where it knows them
        now = self.clock()
        moves = self.balancer.round(snap, now, pinned, self.capacity.rate)
        if not moves:
            return []
        # at most one round's writes per 0.9 interval across replicas (a replica's own rounds are
        # an interval apart): the next plan sees reports from after the moves
        spacing = 0.9 * self.settings.balance.interval
        epoch, written = await self._run(self.store.set_balance_overrides, [(m.host, m.target) for m in moves], now, spacing)
        if not written:
            return []
        self.balancer.applied(moves, now)
        log.info("balance: %d hosts moved (epoch %d): %s", written, epoch,
                 ", ".join(f"{m.host} ({m.urls} URLs) {m.source} -> {m.target}" for m in moves))
        await self.refresh()
        return moves

    # -- membership --------------------------------------------------------------------------
    def place_of(self, ip: str) -> Place:
        """An address's city, coordinates and ASN through the DBs (empty where they know none)."""
        place = Place()
        if self.city_db is not None:
            g = self.city_db.lookup(ip)
            if g is not None:
                place = Place(g.city, g.country, g.lat, g.lon)
        if self.asn_db is not None:
            place = Place(place.city, place.country, place.lat, place.lon, self.asn_db.lookup(ip))
        return place

    def locate_agent(self, rec: AgentRecord, evidence: Evidence = Evidence()) -> AgentRecord:
        """The record with the agent's place (consultant/whereabouts.py): from the operator's
        [agents.<id>] table, else (mutual TLS) from its certificate or connection, its own
        claims only checked; in plaintext, from its claims as before."""
        configured = self.settings.agents.get(rec.agent_id)
        if configured is None and not evidence.verified:
            return self._locate_by_claims(rec)
        claim = Place(rec.city, rec.country, rec.lat, rec.lon, rec.asn)
        where = settle(rec.agent_id, rec.source_ip, claim, evidence, configured, self.place_of)
        p = where.place
        return replace(rec, source_ip=where.ip, city=p.city, country=p.country, lat=p.lat, lon=p.lon, asn=p.asn)

    def _locate_by_claims(self, rec: AgentRecord) -> AgentRecord:
        """Plaintext (nothing is verified): the claimed location, the rest filled in from the
        claimed source_ip (else the address's IP, or its name in the hosts file) through the DBs."""
        ip = ip_literal(rec.source_ip) if rec.source_ip else None
        if ip is None:
            ip = ip_literal(rec.address.rpartition(":")[0].strip("[]"))
        if ip is None:
            ip = self.resolver.static(rec.address.rpartition(":")[0])
        if ip is None:
            return rec
        changes: dict[str, Any] = {}
        if rec.lat is None and self.city_db is not None:
            g = self.city_db.lookup(ip)
            if g is not None:
                changes.update(lat=g.lat, lon=g.lon, city=rec.city or g.city, country=rec.country or g.country)
        if not rec.asn and self.asn_db is not None:
            changes["asn"] = self.asn_db.lookup(ip)
        return replace(rec, **changes)

    async def register(self, rec: AgentRecord, evidence: Evidence = Evidence()) -> tuple[int, AgentRecord]:
        """Register (or re-register) an agent; `evidence` is what the server verified of the
        caller (none in plaintext)."""
        validate_agent_id(rec.agent_id)
        validate_address(rec.address)
        if rec.source_ip and ip_literal(rec.source_ip) is None:
            raise InvalidArgument(f"source_ip {shown(rec.source_ip)} is not an IP address")
        if rec.lat is not None and not (-90 <= rec.lat <= 90 and -180 <= (rec.lon or 0) <= 180):
            raise InvalidArgument(f"location lat/lon ({rec.lat}, {rec.lon}) out of range")
        if not math.isfinite(rec.capacity) or rec.capacity < 0:
            raise InvalidArgument(f"capacity must be a finite number >= 0, not {rec.capacity!r}")
        try:
            rec = self.locate_agent(rec, evidence)
        except PermissionDenied as exc:
            self._log_refusal(rec.agent_id, str(exc))
            raise
        if rec.capacity > 0:
            rec = replace(rec, weight=rec.capacity)
        epoch, bumped = await self._run(self.store.register, rec, self.clock(), self.settings.lease_seconds)
        self.stats.registrations += 1
        if bumped:
            log.info("agent %s registered at %s (%s, AS%d): epoch %d", rec.agent_id, rec.address, rec.city or "?", rec.asn, epoch)
            await self.refresh()
        return epoch, rec

    def _log_refusal(self, agent_id: str, reason: str) -> None:
        # Once per agent and reason: a refused agent tries again every heartbeat interval.
        key = f"{agent_id}\0{reason}"
        if key not in self._refusals_logged and len(self._refusals_logged) < _MAX_LOGGED_REFUSALS:
            self._refusals_logged.add(key)
            log.warning("Register of %s refused: %s", agent_id, reason)

    async def heartbeat(self, agent_id: str, load: dict) -> int:
        validate_agent_id(agent_id)
        self.capacity.record(agent_id, load)
        capacity = float(load.get("capacity") or 0) or None
        if self.partitioner.weights_from_model:
            capacity = self._model_weight(agent_id) or capacity
        epoch, bumped = await self._run(
            self.store.heartbeat, agent_id, load, self.clock(), self.settings.lease_seconds, capacity,
            self.partitioner.reweight_threshold,
        )
        self.stats.heartbeats += 1
        if bumped:
            await self.refresh()
        return epoch

    def _model_weight(self, agent_id: str) -> float | None:
        """weighted, source = "model": the agent's share by the capacity model and our allocator
        (CapacityBook.shares), moved at most CapacityBook.step from its weight now; the store
        takes it only past the strategy's reweight_threshold (hysteresis), with an epoch bump,
        and the hosts move through the handover."""
        alive = [r.agent_id for r in self.directory.records]
        if agent_id not in alive:
            alive.append(agent_id)
        share = self.capacity.shares(alive, self.clock()).get(agent_id)
        if share is None:
            return None
        rec = self.directory.snapshot.agents.get(agent_id)
        return self.capacity.step(rec.weight if rec is not None else 1.0, share)

    async def refit_capacity(self, wait: float | None = None) -> None:
        """Refit the runtime model when due (consultant/capacity/book.py), in a thread, one fit at
        a time. `wait` bounds how long the caller waits for a fit under way (None: until it ends):
        ListAgents answers with the last model rather than wait on a fit that a loaded machine
        can stretch past its caller's deadline (an MLP fit with cross-validation takes seconds)."""
        task = self._fit_task
        if task is None or task.done():
            samples = self.capacity.due(self.clock())
            if samples is None:
                return
            task = self._fit_task = asyncio.create_task(self._fit(samples))
        await asyncio.wait({task}, timeout=wait)

    async def _fit(self, samples: list) -> None:
        try:
            self.capacity.adopt(await asyncio.to_thread(self.capacity.fit_samples, samples))
        except Exception:  # noqa: BLE001 - a failed fit keeps the last model; the next is due later
            log.exception("capacity refit failed")

    async def deregister(self, agent_id: str) -> int:
        validate_agent_id(agent_id)
        epoch = await self._run(self.store.deregister, agent_id, self.clock())
        self.stats.deregistrations += 1
        log.info("agent %s deregistered: epoch %d", agent_id, epoch)
        await self.refresh()
        return epoch

    async def set_override(self, host: str, agent_id: str) -> int:
        host = canonical_host(host)
        validate_agent_id(agent_id)
        epoch = await self._run(self.store.set_override, host, agent_id, self.clock())
        await self.refresh()
        return epoch

    async def clear_override(self, host: str) -> int:
        epoch = await self._run(self.store.clear_override, canonical_host(host))
        await self.refresh()
        return epoch

    def metrics(self) -> dict[str, float]:
        """Counters and gauges for Prometheus (consultant/metrics.py; read from another thread:
        plain reads of the current directory, which is replaced whole, never changed)."""
        d = self.directory
        dead = sum(1 for a in d.snapshot.agents.values() if a.state == DEAD)
        return {**self.stats.as_dict(), **self.balancer.stats.as_dict(), "epoch": d.epoch, "agents_alive": len(d.records), "agents_dead": dead,
                "answers_cached": len(d.cache), **self.resolver.stats.as_dict(), **self.resolver.gauges()}

    async def snapshot(self) -> Snapshot:
        return await self._run(self.store.snapshot)

    # -- answers -----------------------------------------------------------------------------
    async def resolve(self, hosts: list[str]) -> Resolution:
        if not hosts:
            raise InvalidArgument("hosts is empty: send 1 to max_batch host names")
        if len(hosts) > self.settings.max_batch:
            raise InvalidArgument(f"{len(hosts)} hosts in one request; at most {self.settings.max_batch}")
        d = self.directory
        if d.empty:
            raise FailedPrecondition("no live agents: none is registered with a valid lease")
        self.stats.resolve_requests += 1
        self.stats.hosts_resolved += len(hosts)
        results: list[HostResult | None] = [None] * len(hosts)
        missing: dict[str, list[int]] = {}
        cache = d.cache
        for i, raw in enumerate(hosts):
            try:
                h = canonical_host(raw)
            except InvalidArgument as exc:
                results[i] = HostResult(raw, (), f"hosts[{i}]: {exc}")
                continue
            hit = cache.get(h)
            if hit is not None:
                results[i] = HostResult(h, hit)
            else:
                missing.setdefault(h, []).append(i)
        self.stats.cache_hits += len(hosts) - sum(len(v) for v in missing.values())
        if missing:
            sites = await self.locator.sites(missing, d.needs())
            for h, idxs in missing.items():
                ranked = d.answer(sites[h])
                for i in idxs:
                    results[i] = HostResult(h, ranked)
        return Resolution(d.epoch, d, results)  # type: ignore[arg-type]

    async def explain(self, host: str) -> Explanation:
        h = canonical_host(host)
        d = self.directory
        ip = await self.resolver.resolve(h)
        site = self.locator.site(h, ip, frozenset({"ip", "geo", "asn"}))
        notes: list[str] = []
        needs = d.needs()
        if ip is None:
            # What placement does with it follows: the strategy's fallback (hash) for geo and asn.
            why = self.resolver.failure(h) or "not looked up"
            notes.append(f"IP unknown: {why}" + (" (asked again after the negative cache's time)"
                                                 if self.resolver.system_dns and (why in DEFINITIVE or why == TEMPORARY) else ""))
        if "geo" in needs and site.lat is None:
            notes.append("site location unknown: ranked by rendezvous hash")
        if "asn" in needs and not site.asn:
            notes.append("site ASN unknown: ranked by the fallback strategy")
        if d.empty:
            notes.append("no live agents")
        pinned = d.snapshot.overrides.get(h, "")
        if pinned and pinned not in d.index:
            notes.append(f"override to {pinned} ignored: that agent is not alive")
        # Explain uses the real ranking inputs: the site as the strategy sees it.
        strat_site = self.locator.site(h, ip, needs)
        ranked = d.explain(strat_site)
        return Explanation(h, site, self.settings.strategy, d.epoch, ranked, pinned if pinned in d.index else "", notes, self.settings.ttl_seconds)
