"""Start consultants on port 0 over loopback and register agents, for the tests."""

from __future__ import annotations

import contextlib
from pathlib import Path

from consultant.client import ConsultantClient
from consultant.server import create_server
from consultant.settings import ConsultantSettings, load_settings
from wancrawl.v1 import common_pb2


def settings_for(tmp_path: Path, **keys) -> ConsultantSettings:
    """Settings as the CLI would build them: keys (`a__b` for `a.b`), strategy tables included.
    The balancer is off unless a test turns it on (`balance__enabled=True`), whatever the default:
    its moves would make the other tests' placements depend on load reports."""
    over = {"listen": "127.0.0.1:0", "state_url": f"sqlite:///{tmp_path / 'state.db'}", "dns.system_dns": False,
            "balance.enabled": False}
    over.update({k.replace("__", "."): v for k, v in keys.items()})
    return load_settings(None, over)


@contextlib.asynccontextmanager
async def running(settings: ConsultantSettings):
    server, port = create_server(settings)
    await server.start()
    client = ConsultantClient(f"127.0.0.1:{port}")
    try:
        yield server, client
    finally:
        await client.close()
        await server.stop(0)


def loc(city: str = "", lat: float | None = None, lon: float | None = None, asn: int = 0) -> common_pb2.Location:
    if lat is None:
        return common_pb2.Location(city=city, asn=asn)
    return common_pb2.Location(city=city, lat=lat, lon=lon, has_coordinates=True, asn=asn)


async def register_n(client: ConsultantClient, n: int, prefix: str = "agent") -> int:
    epoch = 0
    for i in range(n):
        r = await client.register(f"{prefix}-{i}", f"127.0.0.{10 + i}:{7000 + i}")
        epoch = r.epoch
    return epoch
