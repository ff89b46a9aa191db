"""The lab web server: a lean asyncio HTTP/1.1 shell around the generator and the link model."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass

from lab.linkmodel import Flow, LinkModel
from lab.topology import SUBDOMAIN_KINDS
from lab.web import REASONS, Response, Web

MAX_HEAD = 96 * 1024
SERVER_NAME = "wancrawl-lab"


@dataclass
class LogEntry:
    t: float  # wall clock (time.time()) when the request head was complete
    client: str
    client_port: int
    site_ip: str
    host: str
    method: str
    path: str
    status: int  # 0: no response is ever sent (the "never" site)
    bytes: int  # body bytes the response carries (as declared, even if the client leaves early)


def port_taken(ips: list[str], port: int) -> str:
    """The first site address on which `port` cannot be bound now ("" when it is free on every
    one): checked before `lab web` says it serves and before `lab up` starts anything. Bound as
    the server binds (SO_REUSEADDR), so a port in TIME_WAIT counts as free, a listener as taken."""
    for ip in ips:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((ip, port))
            except OSError:
                return ip
    return ""


class LabServer:
    """Serves every site of a Web on its own address; exposes the request log and counters.

    With `listen` (an address such as "0.0.0.0"), every site is served on that one socket
    instead: the mode for a container on a compose network (scripts/compose-e2e.sh), where the
    sites' 127.x addresses exist nowhere and clients reach the one container through a hosts
    file. The site comes from the Host header alone (no 421 for "served elsewhere": there is no
    elsewhere), the link model is off (it keys on the client's and site's plan addresses, which
    a container network does not have), and the log's site_ip is the site's plan address, so
    the log reads as the multi-address server's would.
    """

    def __init__(
        self,
        web: Web,
        *,
        port: int | None = None,
        zero_latency: bool = False,
        log_path: str | None = None,
        keep_log: bool = True,
        reuse_port: bool = False,
        listen: str | None = None,
    ):
        if port is not None:
            web = web.with_port(port)
        self.web = web
        self.topology = web.topology
        self.port = self.topology.spec.sites.port
        self.time_scale = web.time_scale
        self.listen = listen
        self.zero_latency = zero_latency or listen is not None
        self.model = None if self.zero_latency else LinkModel(self.topology)
        self.keep_log = keep_log
        self.log: list[LogEntry] = []
        self.counters: dict[str, Counter[str]] = {}
        self.requests = 0
        self._log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if log_path else None
        self._log_buf: list[str] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: set[_Conn] = set()
        self._reuse_port = reuse_port
        self._t0 = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flusher: asyncio.TimerHandle | None = None

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> "LabServer":
        loop = self._loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        for ip in [self.listen] if self.listen is not None else self.topology.site_ips:
            srv = await loop.create_server(
                lambda: _Conn(self), host=ip, port=self.port, reuse_address=True,
                reuse_port=self._reuse_port or None, backlog=2048,
            )
            self._servers.append(srv)
        if self._log_fd is not None:
            self._flusher = loop.call_later(0.2, self._periodic_flush)
        return self

    async def close(self) -> None:
        for s in self._servers:
            s.close()
        for c in list(self._conns):
            c.abort()
        for s in self._servers:
            await s.wait_closed()
        self._servers.clear()
        if self._flusher:
            self._flusher.cancel()
        self.flush_log()
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None

    async def __aenter__(self) -> "LabServer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        await asyncio.gather(*(s.serve_forever() for s in self._servers))

    # --- clock ------------------------------------------------------------------------------
    def model_now(self) -> float:
        """Model seconds since start: wall time multiplied by the time scale."""
        assert self._loop is not None
        return (self._loop.time() - self._t0) * self.time_scale

    async def sleep_until(self, model_t: float) -> None:
        delay = (model_t - self.model_now()) / self.time_scale
        if delay > 0.0002:
            await asyncio.sleep(delay)

    # --- log --------------------------------------------------------------------------------
    def record(self, e: LogEntry) -> None:
        self.requests += 1
        c = self.counters.get(e.host)
        if c is None:
            c = self.counters[e.host] = Counter()
        c["requests"] += 1
        c["bytes"] += e.bytes
        c[f"status_{e.status}"] += 1
        if self.keep_log:
            self.log.append(e)
        if self._log_fd is not None:
            self._log_buf.append(json.dumps(e.__dict__, separators=(",", ":")) + "\n")
            if len(self._log_buf) >= 512:
                self.flush_log()

    def flush_log(self) -> None:
        # One write per batch of whole lines: O_APPEND keeps workers' lines from interleaving.
        if self._log_fd is not None and self._log_buf:
            os.write(self._log_fd, "".join(self._log_buf).encode())
            self._log_buf.clear()

    def _periodic_flush(self) -> None:
        self.flush_log()
        if self._loop is not None and self._servers:
            self._flusher = self._loop.call_later(0.2, self._periodic_flush)


def _head(status: int, headers: list[tuple[str, str]], length: int, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"]
    lines += [f"{k}: {v}\r\n" for k, v in headers]
    # A 304 has no content and declares no length (RFC 9110 8.6: only the 200's would be allowed).
    lines.append(f"Server: {SERVER_NAME}\r\n" if status == 304 else f"Content-Length: {length}\r\nServer: {SERVER_NAME}\r\n")
    if not keep_alive:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _length(resp: Response) -> int:
    """The Content-Length to declare: the body's, or the lie the response asks for."""
    return len(resp.body) if resp.declared_length is None else resp.declared_length


class _Conn(asyncio.Protocol):
    """One client connection: parses pipelined requests, answers them in order."""

    def __init__(self, server: LabServer):
        self.srv = server
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.transport: asyncio.Transport | None = None
        self.flow: Flow | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's; uvloop's TCPTransport has the same methods but is not
        # an asyncio.Transport subclass, so no isinstance check here).
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.client_ip, self.client_port = peer[0], peer[1]
        self.site_ip = sock[0]
        sock_obj = transport.get_extra_info("socket")
        if sock_obj is not None:
            try:
                sock_obj.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if self.srv.model is not None:
            self.flow = self.srv.model.flow(self.client_ip, self.site_ip)
        self.srv._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        self.srv._conns.discard(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        srv = self.srv
        tr = self.transport
        assert tr is not None
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    tr.write(_head(431, [], 0, False))
                    tr.close()
                    self.closed = True
                return
            head = bytes(self.buf[:end])
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) != 3:
                del self.buf[: end + 4]
                tr.write(_head(400, [], 0, False))
                tr.close()
                self.closed = True
                return
            method, target, version = parts[0].decode("latin-1"), parts[1].decode("latin-1"), parts[2]
            host = None
            conn_hdr = b""
            body_len = 0
            inm = ims = None  # If-None-Match, If-Modified-Since (the changing web answers 304)
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"host":
                    host = v.strip().decode("latin-1")
                elif k == b"connection":
                    conn_hdr = v.strip().lower()
                elif k == b"if-none-match":
                    inm = v.strip().decode("latin-1")
                elif k == b"if-modified-since":
                    ims = v.strip().decode("latin-1")
                elif k == b"content-length":
                    try:
                        body_len = int(v.strip())
                    except ValueError:
                        body_len = 0
            if len(self.buf) < end + 4 + body_len:
                return  # wait for the request body, then discard it
            del self.buf[: end + 4 + body_len]
            keep = (version == b"HTTP/1.1" and conn_hdr != b"close") or conn_hdr == b"keep-alive"
            if target.startswith(("http://", "https://")):
                rest = target.split("://", 1)[1]
                host, _, path = rest.partition("/")
                target = "/" + path
            site = srv.topology.site(host) if host else None
            if site is None and not host:
                on_ip = srv.topology.sites_on(self.site_ip)
                site = on_ip[0] if on_ip else None
            if site is not None and site.ip != self.site_ip and srv.listen is None:
                resp = Response(421, [("Content-Type", "text/plain")], f"{site.host} is not served at {self.site_ip}\n".encode())
            else:
                resp = srv.web.respond(host, target, site=site, now=srv.model_now(), if_none_match=inm, if_modified_since=ims)
            if site is not None and site.kind not in SUBDOMAIN_KINDS:
                host_name = site.host
            else:
                host_name = (host or "").lower().rsplit(":", 1)[0] if host and not host.startswith("[") else (host or "")
            site_ip = site.ip if site is not None and srv.listen is not None else self.site_ip
            srv.record(LogEntry(time.time(), self.client_ip, self.client_port, site_ip, host_name, method, target, resp.status, len(resp.body)))
            if resp.declared_length is not None:
                keep = False  # the bytes past the lying length must not be read as a next response
            if resp.mode == "normal" and self.flow is None:
                data = _head(resp.status, resp.headers, _length(resp), keep)
                tr.write(data if method == "HEAD" else data + resp.body)
                if not keep:
                    tr.close()
                    self.closed = True
                continue
            self.busy = True
            asyncio.get_running_loop().create_task(self._send_slowly(resp, keep, method == "HEAD"))

    async def _send_slowly(self, resp: Response, keep: bool, head_only: bool) -> None:
        srv = self.srv
        tr = self.transport
        assert tr is not None
        try:
            if resp.mode == "never":
                # Hold the connection open and answer nothing; the client has to give up.
                return
            start = srv.model_now()
            if self.flow is not None:
                start = self.flow.response_start(start)
                await srv.sleep_until(start)
            head = _head(resp.status, resp.headers, _length(resp), keep)
            body = b"" if head_only else resp.body
            if resp.mode == "drip":
                spec = srv.web.spec
                tr.write(head)
                t = srv.model_now()
                for off in range(0, len(body), spec.drip_bytes):
                    if self.closed:
                        return
                    tr.write(body[off : off + spec.drip_bytes])
                    t += spec.drip_interval_s
                    await srv.sleep_until(t)
            elif self.flow is None:
                tr.write(head + body)
            else:
                data = memoryview(head + body)
                step = self.flow.model.spec.chunk_bytes
                t = start
                for off in range(0, len(data), step):
                    chunk = data[off : off + step]
                    t = self.flow.send(len(chunk), t)
                    await srv.sleep_until(t)
                    if self.closed:
                        return
                    tr.write(chunk)
                    if not self._writable.is_set():
                        await self._writable.wait()
            if not keep and not self.closed:
                tr.close()
                self.closed = True
        except Exception:  # pragma: no cover - a broken shell must not take the server down
            if not self.closed:
                tr.abort()
                self.closed = True
            raise
        finally:
            if resp.mode != "never":
                self.busy = False
                if not self.closed and self.buf:
                    self._process()


async def run(web: Web, parent_pid: int | None = None, **kwargs: object) -> None:
    """Run one server until cancelled (the CLI's worker body); a worker exits with its parent."""
    srv = LabServer(web, **kwargs)  # type: ignore[arg-type]
    await srv.start()
    try:
        if parent_pid is None:
            await srv.serve_forever()
        else:
            while os.getppid() == parent_pid:
                await asyncio.sleep(1.0)
    finally:
        await srv.close()
