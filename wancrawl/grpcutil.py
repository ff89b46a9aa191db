"""gRPC helpers shared by every service: servers with health checking, error mapping, channels."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from wancrawl import checks, errors
from wancrawl.cli import runs as localruns
from wancrawl.checks import clip_message

if TYPE_CHECKING:
    from wancrawl.auth import Rules

log = logging.getLogger(__name__)

# Batched messages carry up to ~10,000 hosts or a few MB of compressed pages.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.enable_retries", 1),
]

# The one place where domain errors become gRPC status codes.
STATUS_FOR: dict[type[errors.WancrawlError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.NotBuiltYet: grpc.StatusCode.UNIMPLEMENTED,
}


def translate(exc: grpc.aio.AioRpcError, what: str) -> errors.WancrawlError:
    """A failed call as one of our errors, the inverse of STATUS_FOR (the client side of the
    mapping): UNAVAILABLE, DEADLINE_EXCEEDED and anything unknown become Unavailable, which
    callers retry; the others will fail the same way again. PERMISSION_DENIED stays
    Unavailable for callers, as the authorization interceptor's refusals always were: retried,
    since a certificate or the service's config may change under a running process."""
    cls: type[errors.WancrawlError] = errors.Unavailable
    for err, code in STATUS_FOR.items():
        if code == exc.code() and err not in (errors.ConfigError, errors.PermissionDenied):
            cls = err
            break
    details = exc.details() or ""
    plain = explain_failure(exc.code(), details)
    return cls(clip_message(f"{what}: {exc.code().name}: {plain or details}"))


# Connection failures as grpc's C core words them, and what a user should read instead (the
# OpenSSL text ends in ": OK" and names no cause). First match wins; the address is grpc's.
_FAILURES: list[tuple[str, str]] = [
    ("CERTIFICATE_VERIFY_FAILED",
     "TLS: this CA did not sign the server's certificate at {addr}: is the CA (--ca, WANCRAWL_TLS_CA) or "
     "operator.env from another run? `source RUN/pki/operator.env` of the run that started the service"),
    ("Socket closed",
     "the server at {addr} closed the connection (during the TLS handshake: it refused our certificate; is the "
     "certificate from another run's CA?)"),
    ("Connection refused",
     "connection refused: nothing listens at {addr} (is the service running? `lab up` and `manager crawl` print "
     "their addresses)"),
    ("Connection reset", "connection reset by {addr} (the service stopped or restarted?)"),
    ("Ssl handshake failed", "TLS handshake with {addr} failed (a wrong CA or certificate, or not a TLS port?)"),
    ("Tls handshake failed", "TLS handshake with {addr} failed (a wrong CA or certificate, or not a TLS port?)"),
    ("Deadline Exceeded", "timed out: no answer from {addr} in time (overloaded, paused, or an unroutable address?)"),
    ("DNS resolution failed", "cannot resolve the address {addr}"),
]
_ADDRESS = re.compile(r"ipv[46]:(\[[^\]]*\]:\d+|[^:\s]+:\d+)")


def explain_failure(code: grpc.StatusCode, details: str) -> str:
    """A connection failure in plain words naming its fix; "" when it is none we know."""
    if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ""
    m = _ADDRESS.search(details)
    addr = m.group(1) if m else "the address dialled"
    for needle, text in _FAILURES:
        if needle.lower() in details.lower():
            return text.format(addr=addr)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"timed out: no answer in time ({details})"
    return ""


def status_for(exc: BaseException) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in STATUS_FOR:
            return STATUS_FOR[cls]  # type: ignore[index]
    return grpc.StatusCode.INTERNAL


def checked_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """A request deserializer that never raises: bytes that do not parse (a string field that
    is not UTF-8, a truncated message) become a `checks.Malformed` saying which field, which
    ErrorInterceptor answers with INVALID_ARGUMENT. Raised from the deserializer, grpc.aio would
    answer UNKNOWN and log a traceback (unary) or hand the exception to the servicer (streams)."""
    if deserialize is None:
        return None
    # The generated code registers `RequestType.FromString`: its class names the message type.
    descriptor = getattr(getattr(deserialize, "__self__", None), "DESCRIPTOR", None)

    def deserializer(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # noqa: BLE001 - any failure to parse is the client's malformed request
            return checks.malformed(descriptor, data, exc)

    return deserializer


def refuse_malformed(request: Any) -> None:
    if isinstance(request, checks.Malformed):
        raise errors.InvalidArgument(request.reason)


async def parsed(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A request stream in which a message that did not parse ends the call (INVALID_ARGUMENT)."""
    async for m in requests:
        refuse_malformed(m)
        yield m


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns WancrawlError (and unexpected exceptions) into gRPC statuses with clear messages;
    counts them per status code in `errors` (the `rpc_errors` metric of every service). Requests
    that do not parse are INVALID_ARGUMENT naming the field (`checked_deserializer`)."""

    def __init__(self, errors: dict[str, float] | None = None):
        self.errors: dict[str, float] = {} if errors is None else errors

    def _count(self, code: grpc.StatusCode) -> grpc.StatusCode:
        key = code.name.lower()
        self.errors[key] = self.errors.get(key, 0.0) + 1
        return code

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method

        def arguments(request_or_iter: Any, stream_in: bool) -> Any:
            if stream_in:
                return parsed(request_or_iter)
            refuse_malformed(request_or_iter)
            return request_or_iter

        def wrap_unary(fn: Callable[..., Awaitable[Any]], stream_in: bool):
            async def wrapper(request_or_iter, context):
                try:
                    return await fn(arguments(request_or_iter, stream_in), context)
                except errors.WancrawlError as exc:
                    await context.abort(self._count(status_for(exc)), clip_message(str(exc)))
                except (grpc.aio.AbortError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001 - the service must keep running
                    log.exception("unhandled error in %s", method)
                    await context.abort(self._count(grpc.StatusCode.INTERNAL), clip_message(f"internal error: {type(exc).__name__}: {exc}"))

            return wrapper

        def wrap_stream(fn: Callable[..., Any], stream_in: bool):
            async def wrapper(request, context):
                try:
                    async for item in fn(arguments(request, stream_in), context):
                        yield item
                except errors.WancrawlError as exc:
                    await context.abort(self._count(status_for(exc)), clip_message(str(exc)))
                except (grpc.aio.AbortError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001
                    log.exception("unhandled error in %s", method)
                    await context.abort(self._count(grpc.StatusCode.INTERNAL), clip_message(f"internal error: {type(exc).__name__}: {exc}"))

            return wrapper

        de, se = checked_deserializer(handler.request_deserializer), handler.response_serializer
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(wrap_unary(handler.unary_unary, False), de, se)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(wrap_unary(handler.stream_unary, True), de, se)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(wrap_stream(handler.unary_stream, False), de, se)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(wrap_stream(handler.stream_stream, True), de, se)
        return handler


# --- Transport security: every server and channel is made here -------------------------------

# The environment a process without a [tls] table falls back to (CLIs, the manager, tests):
# WANCRAWL_TLS_CA, WANCRAWL_TLS_CERT, WANCRAWL_TLS_KEY name the files; WANCRAWL_INSECURE=1 asks
# for plaintext (the test suite's conftest sets it for its in-process servers).
ENV_CA, ENV_CERT, ENV_KEY, ENV_INSECURE = "WANCRAWL_TLS_CA", "WANCRAWL_TLS_CERT", "WANCRAWL_TLS_KEY", "WANCRAWL_INSECURE"


@dataclass(frozen=True)
class TlsSettings:
    """The `[tls]` table of every service (and of the manager's flags): the CA that signs the
    peers, this process's certificate and key (wancrawl.pki makes them). With none of the three
    set, WANCRAWL_TLS_* from the environment; plaintext only with `insecure = true` (or
    WANCRAWL_INSECURE=1), warned about at start."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    insecure: bool = False

    @property
    def configured(self) -> bool:
        """Says something: insecure, or files (checked whole by `effective_tls`)."""
        return self.insecure or bool(self.ca or self.cert or self.key)

    def check(self) -> TlsSettings:
        if not self.insecure and not (self.ca and self.cert and self.key):
            raise errors.ConfigError("tls.ca, tls.cert and tls.key go together (all three, or none and insecure = true)")
        return self


def tls_from_env() -> TlsSettings | None:
    ca, cert, key = (os.environ.get(k, "") for k in (ENV_CA, ENV_CERT, ENV_KEY))
    if ca or cert or key:
        if not (ca and cert and key):
            raise errors.ConfigError(f"{ENV_CA}, {ENV_CERT} and {ENV_KEY} go together")
        return TlsSettings(ca, cert, key)
    if os.environ.get(ENV_INSECURE, "").lower() in ("1", "true", "yes"):
        return TlsSettings(insecure=True)
    return None


# Client credentials known for given targets (the lab registers its operator certificate for
# its services' addresses) and a process default (a CLI's --ca/--cert/--key flags).
_client_tls: dict[str, TlsSettings] = {}
_default_client_tls: list[TlsSettings] = []


def register_client_tls(targets: Iterable[str], tls: TlsSettings) -> None:
    for t in targets:
        if t:
            _client_tls[t] = tls


def set_default_client_tls(tls: TlsSettings | None) -> None:
    _default_client_tls[:] = [tls] if tls is not None else []


def effective_tls(tls: TlsSettings | None, target: str = "") -> TlsSettings:
    """The TLS settings in force: the given table if it says anything, then (clients) what was
    registered for the target and the process default, then the environment; else ConfigError."""
    if tls is not None and tls.configured:
        return tls.check()
    if target and target in _client_tls:
        return _client_tls[target]
    if target and _default_client_tls:
        return _default_client_tls[0]
    env = tls_from_env()
    if env is not None:
        return env
    if target:
        found = localruns.find(target)  # a run of `lab up` / `manager crawl` listing this address
        if found is not None:
            return TlsSettings(found.ca, found.cert, found.key)
    raise errors.ConfigError(no_credentials_message(target))


def quiet_core_logs() -> None:
    """A command line's stderr without grpc's C-core INFO lines (a failed handshake printed
    OpenSSL's text before our own message said what it means); GRPC_VERBOSITY set by the
    user wins. grpc reads it when its core starts, at the first channel or server."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def no_credentials_message(target: str) -> str:
    """What to do when no credentials are found: the runs' operator.env files first (the usual
    case: a lab or crawl started from another directory or with another --run-dir)."""
    who = f"dial {target}" if target else "serve"
    envs = localruns.env_files() if target else []
    first = (f"`source {envs[-1]}` (the operator certificate of a run here; `lab up` and `manager crawl` write one), or "
             if envs else "")
    return (f"no TLS credentials to {who}: {first}set {ENV_CA}/{ENV_CERT}/{ENV_KEY} or [tls] ca, cert and key "
            f"(certificates from `wancrawl pki init DIR` and `wancrawl pki issue DIR operator NAME`); "
            f"plaintext only with [tls] insecure = true (or {ENV_INSECURE}=1)")


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise errors.ConfigError(f"tls.{what}: cannot read {path}: {exc.strerror or exc}") from None


def check_pair(tls: TlsSettings, ca: bytes, cert: bytes, key: bytes) -> None:
    """The files parse and the key is the certificate's (grpc would only fail at a handshake)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        x509.load_pem_x509_certificates(ca)
    except ValueError as exc:
        raise errors.ConfigError(f"tls.ca {tls.ca}: not a PEM certificate ({exc})") from None
    try:
        c = x509.load_pem_x509_certificate(cert)
    except ValueError as exc:
        raise errors.ConfigError(f"tls.cert {tls.cert}: not a PEM certificate ({exc})") from None
    try:
        k = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise errors.ConfigError(f"tls.key {tls.key}: not an unencrypted PEM private key ({exc})") from None
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if c.public_key().public_bytes(*fmt) != k.public_key().public_bytes(*fmt):
        raise errors.ConfigError(f"tls.key {tls.key} is not the key of tls.cert {tls.cert}")


class ServerTls:
    """A server's certificate, key and client CA, re-read by `reload()` (SIGHUP): grpc asks the
    fetcher at each new handshake, so connections opened after a reload see the new files and
    open ones keep theirs."""

    def __init__(self, tls: TlsSettings):
        self.tls = tls
        self._lock = threading.Lock()
        self._pending: Any = None
        self._initial = self._config()

    def _config(self) -> Any:
        ca, cert, key = _read(self.tls.ca, "ca"), _read(self.tls.cert, "cert"), _read(self.tls.key, "key")
        check_pair(self.tls, ca, cert, key)
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def _fetch(self) -> Any:
        with self._lock:
            cfg, self._pending = self._pending, None
        return cfg

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self._initial, self._fetch, require_client_authentication=True)

    def reload(self) -> bool:
        """Re-read the files; on an error keep the running ones (logged) and return False."""
        try:
            cfg = self._config()
        except errors.ConfigError as exc:
            log.error("SIGHUP: TLS certificates not reloaded, keeping the running ones: %s", exc)
            return False
        with self._lock:
            self._pending = cfg
        log.info("TLS certificate %s and CA %s reloaded (new connections use them)", self.tls.cert, self.tls.ca)
        return True


class Security:
    """What `new_server` set up: server credentials (None = plaintext) and the authorizer."""

    def __init__(self, tls: TlsSettings, name: str, rules: "Rules | None"):
        from wancrawl.auth import Authorizer

        self.name = name
        self.tls = effective_tls(tls)
        self.server_tls = None if self.tls.insecure else ServerTls(self.tls)
        self.authorizer: Authorizer | None = None
        if self.server_tls is not None and rules is not None:
            self.authorizer = Authorizer(name, rules)
        self.rpc_errors: dict[str, float] = {}  # gRPC status code -> RPCs answered with it (ErrorInterceptor)

    @property
    def insecure(self) -> bool:
        return self.server_tls is None

    def warn_if_insecure(self, address: str) -> None:
        if self.insecure:
            log.warning("%s on %s serves PLAINTEXT without authentication ([tls] insecure = true or %s=1): "
                        "anyone who reaches the port can call every RPC", self.name, address, ENV_INSECURE)

    def reload(self) -> bool:
        return self.server_tls.reload() if self.server_tls is not None else True

    def counters(self) -> dict[str, float]:
        return self.authorizer.counters() if self.authorizer is not None else {}

    def metrics(self) -> dict[str, float | dict[str, float]]:
        """The server's own numbers for Prometheus (wancrawl.metrics.SERVER_HELP)."""
        return {**self.counters(), "rpc_errors": dict(self.rpc_errors)}


def new_server(tls: TlsSettings | None = None, *, name: str = "server",
               rules: "Rules | None" = None) -> tuple[grpc.aio.Server, health.aio.HealthServicer, Security]:
    """A grpc.aio server with the error interceptor, the authorization interceptor of `rules`
    (wancrawl.auth: a table method -> roles; on with TLS) and the standard health service (mark
    the services SERVING with `mark_serving` once started). `tls` is the service's [tls] table;
    bind with `bind(server, listen, security)`."""
    security = Security(tls or TlsSettings(), name, rules)
    interceptors: list[grpc.aio.ServerInterceptor] = [ErrorInterceptor(security.rpc_errors)]
    if security.authorizer is not None:
        interceptors.insert(0, security.authorizer.interceptor())
    # No SO_REUSEPORT (grpc's default on): a port another process listens on fails `bind`
    # (address in use) instead of the two servers sharing its connections.
    server = grpc.aio.server(interceptors=interceptors, options=CHANNEL_OPTIONS + [("grpc.so_reuseport", 0)])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer, security


async def mark_serving(health_servicer: health.aio.HealthServicer, service_names: Iterable[str]) -> None:
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    for name in service_names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


async def mark_not_serving(health_servicer: health.aio.HealthServicer) -> None:
    await health_servicer.enter_graceful_shutdown()


def bind(server: grpc.aio.Server, listen: str, security: Security) -> int:
    """Bind `listen` (host:port, port 0 for any) with mutual TLS, or plaintext when `security`
    is insecure; return the port bound."""
    try:
        if security.server_tls is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, security.server_tls.credentials())
    except RuntimeError:  # grpc >= 1.5x raises where older ones returned 0
        port = 0
    if port == 0:
        raise errors.ConfigError(f"cannot listen on {listen!r} (address in use or invalid)")
    return port


def message_or_bytes(m: Any) -> bytes:
    """A request serializer for calls that take a message or its serialized bytes: bytes built
    once (a spool file, a replication round's host messages) go on the wire as they are, not
    parsed and serialized again (issue 24). The server decodes the same message either way."""
    return m if isinstance(m, bytes) else m.SerializeToString()


def channel_credentials(tls: TlsSettings) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(_read(tls.ca, "ca"), _read(tls.key, "key"), _read(tls.cert, "cert"))


def channel(target: str, tls: TlsSettings | None = None, *, server_name: str = "",
            options: Iterable[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """An async channel with wancrawl's message limits and keepalives: mutual TLS with `tls`
    (or what effective_tls finds for the target), plaintext only when that says insecure.
    server_name: the name the server's certificate must carry instead of the target's host (a
    Kademlia node's id name, wancrawl/kademlia/xorspace.py id_san). options: more channel options
    (wancrawl/failover.py's faster reconnects)."""
    t = effective_tls(tls, target)
    opts = CHANNEL_OPTIONS + list(options)
    if t.insecure:
        return grpc.aio.insecure_channel(target, options=opts)
    opts += [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.aio.secure_channel(target, channel_credentials(t), options=opts)


def host_port(listen: str, port: int) -> str:
    """The address clients should dial for a server bound to `listen` on `port`."""
    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


async def check_health(target: str, service: str = "", timeout: float = 2.0, tls: TlsSettings | None = None) -> bool:
    async with channel(target, tls) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        try:
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return resp.status == health_pb2.HealthCheckResponse.SERVING


async def run_until_signalled(
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[Any]],
    on_reload: Callable[[], Awaitable[Any]] | None = None,
    finished: asyncio.Event | None = None,
) -> None:
    """Start, wait for SIGTERM/SIGINT (graceful stop), SIGHUP (reload) or `finished`, then stop."""
    loop = asyncio.get_running_loop()
    done = finished or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    if on_reload is not None:
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(on_reload()))
    await start()
    try:
        await done.wait()
    finally:
        await stop()
