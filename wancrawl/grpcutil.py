"""gRPC helpers shared by every service: servers with health checking, error mapping, channels."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from wancrawl import errors

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
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.NotBuiltYet: grpc.StatusCode.UNIMPLEMENTED,
}


def translate(exc: grpc.aio.AioRpcError, what: str) -> errors.WancrawlError:
    """A failed call as one of our errors, the inverse of STATUS_FOR (the client side of the
    mapping): UNAVAILABLE, DEADLINE_EXCEEDED and anything unknown become Unavailable, which
    callers retry; the others will fail the same way again."""
    cls: type[errors.WancrawlError] = errors.Unavailable
    for err, code in STATUS_FOR.items():
        if code == exc.code() and err is not errors.ConfigError:
            cls = err
            break
    return cls(f"{what}: {exc.code().name}: {exc.details()}")


def status_for(exc: BaseException) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in STATUS_FOR:
            return STATUS_FOR[cls]  # type: ignore[index]
    return grpc.StatusCode.INTERNAL


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns WancrawlError (and unexpected exceptions) into gRPC statuses with clear messages."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method

        def wrap_unary(fn: Callable[..., Awaitable[Any]]):
            async def wrapper(request_or_iter, context):
                try:
                    return await fn(request_or_iter, context)
                except errors.WancrawlError as exc:
                    await context.abort(status_for(exc), str(exc))
                except (grpc.aio.AbortError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001 - the service must keep running
                    log.exception("unhandled error in %s", method)
                    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

            return wrapper

        def wrap_stream(fn: Callable[..., Any]):
            async def wrapper(request, context):
                try:
                    async for item in fn(request, context):
                        yield item
                except errors.WancrawlError as exc:
                    await context.abort(status_for(exc), str(exc))
                except (grpc.aio.AbortError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001
                    log.exception("unhandled error in %s", method)
                    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

            return wrapper

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                wrap_unary(handler.unary_unary), handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                wrap_unary(handler.stream_unary), handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                wrap_stream(handler.unary_stream), handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                wrap_stream(handler.stream_stream), handler.request_deserializer, handler.response_serializer
            )
        return handler


def new_server() -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """A grpc.aio server with the error interceptor and the standard health service (mark the
    services SERVING with `mark_serving` once started)."""
    server = grpc.aio.server(interceptors=[ErrorInterceptor()], options=CHANNEL_OPTIONS)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, service_names: Iterable[str]) -> None:
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    for name in service_names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


async def mark_not_serving(health_servicer: health.aio.HealthServicer) -> None:
    await health_servicer.enter_graceful_shutdown()


def bind(server: grpc.aio.Server, listen: str) -> int:
    """Bind `listen` (host:port, port 0 for any) without TLS; return the port bound."""
    port = server.add_insecure_port(listen)
    if port == 0:
        raise errors.ConfigError(f"cannot listen on {listen!r} (address in use or invalid)")
    return port


def channel(target: str) -> grpc.aio.Channel:
    """An insecure async channel with wancrawl's message limits and keepalives."""
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)


def host_port(listen: str, port: int) -> str:
    """The address clients should dial for a server bound to `listen` on `port`."""
    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


async def check_health(target: str, service: str = "", timeout: float = 2.0) -> bool:
    async with channel(target) as ch:
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
