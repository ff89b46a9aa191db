"""Authorization from the peer's certificate: one table per service, one interceptor.

A service declares `Rules`: for each of its RPCs the roles that may call it and, per role, the
request field that must name the caller (an agent acts only as the id in its certificate). The
identity is the `wancrawl://ROLE/NAME` URI subject alternative name of the client certificate
that mutual TLS has already verified against the CA (wancrawl.pki issues them).

Refusals: no identity of ours in the certificate -> UNAUTHENTICATED; a role the table does not
allow, a field naming someone else, or an RPC with no rule -> PERMISSION_DENIED; each with the
reason, logged once per peer and counted (`auth_refused_*` in the service's metrics). A client
without a certificate, or with one from another CA, never gets this far: the TLS handshake
fails and the client sees UNAVAILABLE.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from wancrawl.checks import Malformed
from wancrawl.pki import Identity, identity_of_pem, parse_uri, source_ips_of_pem, source_ips_of_uris

log = logging.getLogger(__name__)

HEALTH_SERVICE = "grpc.health.v1.Health"
_MAX_LOGGED_PEERS = 10_000


@dataclass(frozen=True)
class Rules:
    """`methods`: RPC name -> {role: field}; the field ("" = none) of each request message that
    must equal the caller's name, a dotted path where a repeated field checks every element
    ("captures.agent_id"). Streamed requests are checked message by message."""

    service: str  # the full service name, e.g. "wancrawl.v1.Agent"
    methods: Mapping[str, Mapping[str, str]]
    health_roles: frozenset[str] = field(default_factory=lambda: frozenset({"agent", "operator", "service"}))
    # RPC name -> {field path: roles that may set it}: a flag (a bool, or any value that is not
    # its default) that only these roles may set, e.g. an operator's `force`. A caller of another
    # role who sets it is refused, whatever else it may do with the method.
    flags: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)

    def rule(self, full_method: str) -> Mapping[str, str] | None:
        svc, _, name = full_method.lstrip("/").partition("/")
        if svc == HEALTH_SERVICE:
            return {r: "" for r in self.health_roles}
        if svc != self.service:
            return None
        return self.methods.get(name)


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def peer_identity(context: Any) -> Identity | None:
    """The identity in the verified client certificate of a call (None: none of ours)."""
    ctx = context.auth_context() or {}
    uris = [v.decode(errors="replace") for v in ctx.get("peer_uri", [])]
    found = {i for i in (parse_uri(u) for u in uris) if i}
    if not found and ctx.get("x509_pem_cert"):  # older grpc without peer_uri
        ident = identity_of_pem(ctx["x509_pem_cert"][0])
        found = {ident} if ident else set()
    return found.pop() if len(found) == 1 else None


def peer_source_ips(context: Any) -> set[str]:
    """The source addresses bound in the verified client certificate of a call
    (`wancrawl://source-ip/ADDR`, `wancrawl pki issue ... --source-ip`); empty: none."""
    ctx = context.auth_context() or {}
    uris = [v.decode(errors="replace") for v in ctx.get("peer_uri", [])]
    if not uris and ctx.get("x509_pem_cert"):  # older grpc without peer_uri
        return source_ips_of_pem(ctx["x509_pem_cert"][0])
    return source_ips_of_uris(uris)


def _who(context: Any) -> str:
    """The peer, for logs: its identity, else its certificate's subject, else its address."""
    ident = peer_identity(context)
    if ident is not None:
        return str(ident)
    subject = (context.auth_context() or {}).get("x509_subject")
    if subject:
        return "certificate " + subject[0].decode(errors="replace")
    return str(context.peer()).rsplit(":", 1)[0]


def _values(message: Any, path: str) -> list[Any]:
    items = [message]
    for part in path.split("."):
        nxt: list[Any] = []
        for it in items:
            v = getattr(it, part)
            if hasattr(v, "__len__") and not isinstance(v, (str, bytes)):
                nxt.extend(v)
            else:
                nxt.append(v)
        items = nxt
    return items


def check_fields(ident: Identity, path: str, message: Any, method: str) -> None:
    # A request that did not parse has no fields: the error interceptor, next in line, refuses
    # it with INVALID_ARGUMENT (the caller was admitted by role already).
    if not path or isinstance(message, Malformed):
        return
    for v in _values(message, path):
        if v != ident.name:
            shown = str(v)[:80]
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"{method}: {ident} may act only as {ident.name!r}, not as {shown!r} (field {path})")


def check_flags(ident: Identity, flags: Mapping[str, frozenset[str]], message: Any, method: str) -> None:
    """Refuse a flag set by a role that may not set it (Rules.flags)."""
    if isinstance(message, Malformed):
        return  # no fields: refused as INVALID_ARGUMENT next (check_fields says why)
    for path, roles in flags.items():
        if ident.role not in roles and any(_values(message, path)):
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"{method}: {path} may be set only by {', '.join(sorted(roles))}, not by {ident}")


class Authorizer:
    """The rules of one service applied to every call; counts and logs refusals."""

    def __init__(self, name: str, rules: Rules):
        self.name = name
        self.rules = rules
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {"auth_refused_unauthenticated": 0.0, "auth_refused_permission_denied": 0.0}
        self._logged: set[str] = set()

    def counters(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counts)

    def decide(self, method: str, context: Any) -> tuple[Identity, str]:
        """(identity, the request field to check) for an allowed call; Refused otherwise."""
        ident = peer_identity(context)
        short = method.rsplit("/", 1)[-1]
        if ident is None:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED,
                          f"{short}: the client certificate carries no wancrawl identity (a wancrawl://ROLE/NAME URI; "
                          "issue certificates with `wancrawl pki issue`)")
        rule = self.rules.rule(method)
        if rule is None:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, f"{short}: no authorization rule for this method on {self.name}")
        if ident.role not in rule:
            allowed = ", ".join(sorted(rule)) or "nobody"
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, f"{short}: {ident} may not call it (allowed: {allowed})")
        return ident, rule[ident.role]

    def refused(self, exc: Refused, method: str, context: Any) -> None:
        key = "auth_refused_" + exc.code.name.lower()
        try:
            who = _who(context)
        except Exception:  # noqa: BLE001 - logging must not fail the refusal
            who = "?"
        with self._lock:
            self._counts[key] = self._counts.get(key, 0.0) + 1
            first = who not in self._logged and len(self._logged) < _MAX_LOGGED_PEERS
            if first:
                self._logged.add(who)
        if first:
            log.warning("%s refused %s from %s: %s %s (further refusals of this peer are not logged)",
                        self.name, method, who, exc.code.name, exc.reason)

    def interceptor(self) -> grpc.aio.ServerInterceptor:
        return _AuthInterceptor(self)


class _AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authz: Authorizer):
        self.authz = authz

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        authz = self.authz
        short = method.rsplit("/", 1)[-1]
        flags = authz.rules.flags.get(short, {}) if method.lstrip("/").startswith(authz.rules.service + "/") else {}

        async def admit(context: Any) -> tuple[Identity, str]:
            try:
                return authz.decide(method, context)
            except Refused as exc:
                authz.refused(exc, method, context)
                await context.abort(exc.code, exc.reason)
                raise  # not reached: abort raises

        async def check(ident: Identity, path: str, message: Any, context: Any) -> None:
            try:
                check_fields(ident, path, message, short)
                if flags:
                    check_flags(ident, flags, message, short)
            except Refused as exc:
                authz.refused(exc, method, context)
                await context.abort(exc.code, exc.reason)

        def checked_stream(ident: Identity, path: str, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async def gen():
                async for m in requests:
                    await check(ident, path, m, context)
                    yield m

            return gen()

        def unary_in(fn: Callable[..., Any], streaming_out: bool):
            if streaming_out:
                async def wrapper_s(request, context):
                    ident, path = await admit(context)
                    await check(ident, path, request, context)
                    async for item in fn(request, context):
                        yield item

                return wrapper_s

            async def wrapper(request, context):
                ident, path = await admit(context)
                await check(ident, path, request, context)
                return await fn(request, context)

            return wrapper

        def stream_in(fn: Callable[..., Any], streaming_out: bool):
            if streaming_out:
                async def wrapper_s(requests, context):
                    ident, path = await admit(context)
                    async for item in fn(checked_stream(ident, path, requests, context), context):
                        yield item

                return wrapper_s

            async def wrapper(requests, context):
                ident, path = await admit(context)
                return await fn(checked_stream(ident, path, requests, context), context)

            return wrapper

        de, se = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary_in(handler.unary_unary, False), de, se)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(unary_in(handler.unary_stream, True), de, se)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(stream_in(handler.stream_unary, False), de, se)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(stream_in(handler.stream_stream, True), de, se)
        return handler


def role_table(rules: Rules) -> list[tuple[str, str, str]]:
    """(method, role, acting-as field) rows, for docs and tests."""
    return [(m, r, f) for m, roles in rules.methods.items() for r, f in sorted(roles.items())]


__all__ = ["Authorizer", "Rules", "Refused", "peer_identity", "peer_source_ips", "role_table"]
