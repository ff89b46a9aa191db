"""Mutual TLS and authorization (issue 13, docs/security.md).

Every RPC of every service, enumerated from the generated service descriptors (a new RPC is
covered, and must have a rule, automatically), is called over real mutual TLS:
- with no client certificate and with a certificate from another CA: the TLS handshake fails,
  so no RPC runs and the client sees UNAVAILABLE (grpc reports a failed handshake that way; the
  server never gets to answer UNAUTHENTICATED);
- with a certificate of our CA that carries no wancrawl identity: UNAUTHENTICATED;
- with the certificate of each role the table does not allow (an agent calling operator RPCs,
  an operator calling agent RPCs, a service calling anything): PERMISSION_DENIED;
- as an agent naming another agent's id in the request: PERMISSION_DENIED;
- as an allowed role acting as itself: not refused (OK, or what the service itself answers to
  an empty request, e.g. INVALID_ARGUMENT).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from pathlib import Path

import grpc
import pytest

from agent.server import AUTH_RULES as AGENT_RULES, create_server as create_agent
from consultant.server import AUTH_RULES as CONSULTANT_RULES, create_server as create_consultant
from storage.config import load as storage_settings
from storage.server import AUTH_RULES as STORAGE_RULES, create_server as create_storage
from wancrawl import grpcutil, pki
from wancrawl.kademlia import xorspace
from wancrawl.auth import Rules
from wancrawl.errors import ConfigError
from wancrawl.grpcutil import TlsSettings
from wancrawl.v1 import agent_pb2, consultant_pb2, storage_pb2

from agent_helpers import agent_config
from consultant_helpers import settings_for

REFUSED = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAVAILABLE}
SERVICES = [(consultant_pb2, "Consultant", CONSULTANT_RULES), (agent_pb2, "Agent", AGENT_RULES),
            (storage_pb2, "Storage", STORAGE_RULES)]


def tls_of(d: Path, role: str, name: str) -> TlsSettings:
    return TlsSettings(str(d / "ca.crt"), str(d / f"{role}-{name}.crt"), str(d / f"{role}-{name}.key"))


def no_identity_cert(d: Path) -> TlsSettings:
    """A client certificate our CA signed, without a wancrawl://ROLE/NAME URI."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nobody")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    (d / "nobody.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "nobody.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return TlsSettings(str(d / "ca.crt"), str(d / "nobody.crt"), str(d / "nobody.key"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    pki.init(d)
    for role, name in [("service", "consultant"), ("service", "storage"), ("agent", "a1"), ("agent", "a2"),
                       ("operator", "op")]:
        pki.issue(d, role, name)
    other = tmp_path_factory.mktemp("other-ca")
    pki.init(other)
    pki.issue(other, "agent", "a1")
    pki.issue(other, "operator", "op")
    return d, other


def request_for(pb2, method, ident_field: str = "", name: str = ""):
    """An empty request of the method, naming `name` in the field the rule checks."""
    msg = getattr(pb2, method.input_type.name)()
    if ident_field:
        head, _, tail = ident_field.partition(".")
        if tail and hasattr(getattr(msg, head), "add"):
            getattr(msg, head).add(**{tail: name})  # a repeated message field: one element
        elif tail:  # a message field
            setattr(getattr(msg, head), tail, name)
        else:
            setattr(msg, head, name)
    return msg


async def call(address: str, tls: TlsSettings | grpc.ChannelCredentials, pb2, service: str, method, request) -> grpc.StatusCode:
    path = f"/wancrawl.v1.{service}/{method.name}"
    resp_cls = getattr(pb2, method.output_type.name)
    ch = grpcutil.channel(address, tls) if isinstance(tls, TlsSettings) else grpc.aio.secure_channel(address, tls)
    async with ch:
        try:
            if method.client_streaming:
                async def one():
                    yield request

                await ch.stream_unary(path, request_serializer=type(request).SerializeToString,
                                      response_deserializer=resp_cls.FromString)(one(), timeout=10)
            else:
                await ch.unary_unary(path, request_serializer=type(request).SerializeToString,
                                     response_deserializer=resp_cls.FromString)(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_every_rpc_has_a_rule():
    for pb2, name, rules in SERVICES:
        methods = set(pb2.DESCRIPTOR.services_by_name[name].methods_by_name)
        assert set(rules.methods) == methods, f"{name}: RPCs without an authorization rule: {methods - set(rules.methods)}"
        assert rules.service == f"wancrawl.v1.{name}"


async def _serving(tmp: Path, d: Path):
    cs = settings_for(tmp, tls__ca=str(d / "ca.crt"), tls__cert=str(d / "service-consultant.crt"),
                      tls__key=str(d / "service-consultant.key"))
    csrv, _ = create_consultant(cs)
    await csrv.start()
    ss = storage_settings(None, {"listen": "127.0.0.1:0", "data_dir": str(tmp / "storage"), "ingest.fsync": "os",
                                 "tls.ca": str(d / "ca.crt"), "tls.cert": str(d / "service-storage.crt"),
                                 "tls.key": str(d / "service-storage.key")})
    ssrv, _ = create_storage(ss)
    await ssrv.start()
    hosts = tmp / "hosts"
    hosts.write_text("")
    t = tls_of(d, "agent", "a1")
    s = agent_config(tmp, "a1", csrv.address, hosts, "127.0.0.1", storage=ssrv.address,
                     tls__ca=t.ca, tls__cert=t.cert, tls__key=t.key)
    asrv, _ = create_agent(s)
    await asrv.start()
    return csrv, ssrv, asrv


def test_every_rpc_refuses_whom_it_must_and_admits_its_roles(certs, tmp_path, caplog):
    d, other = certs
    nobody = no_identity_cert(d)
    roles = {"agent": tls_of(d, "agent", "a2"), "operator": tls_of(d, "operator", "op"),
             "service": tls_of(d, "service", "storage")}
    names = {"agent": "a2", "operator": "op", "service": "storage"}
    no_cert = grpc.ssl_channel_credentials((d / "ca.crt").read_bytes())  # checks the server, shows nothing

    async def main():
        csrv, ssrv, asrv = await _serving(tmp_path, d)
        # The agent's own calls went over mutual TLS as itself: it registered.
        async with grpcutil.channel(csrv.address, roles["operator"]) as ch:
            listed = await ch.unary_unary("/wancrawl.v1.Consultant/ListAgents",
                                          request_serializer=consultant_pb2.ListAgentsRequest.SerializeToString,
                                          response_deserializer=consultant_pb2.ListAgentsResponse.FromString)(
                consultant_pb2.ListAgentsRequest())
        assert [a.agent_id for a in listed.agents] == ["a1"]
        address = {"Consultant": csrv.address, "Agent": asrv.address, "Storage": ssrv.address}
        security = {"Consultant": csrv.security, "Agent": asrv.security, "Storage": ssrv.security}
        seen: list[tuple[str, str, str, grpc.StatusCode]] = []
        try:
            for pb2, service, rules in SERVICES:
                methods = sorted(pb2.DESCRIPTOR.services_by_name[service].methods,
                                 key=lambda m: m.name == "Drain")  # Drain last: it ends the agent
                before = security[service].counters()
                refusals = 0
                for m in methods:
                    rule = rules.methods[m.name]
                    addr = address[service]

                    async def expect(case: str, tls, req, want: set[grpc.StatusCode]):
                        code = await call(addr, tls, pb2, service, m, req)
                        seen.append((service, m.name, case, code))
                        assert code in want, f"{service}.{m.name} {case}: {code} (want {want})"

                    plain = request_for(pb2, m)
                    # No client certificate at all (a CA to check the server with, nothing to show).
                    await expect("no cert", no_cert, plain, {grpc.StatusCode.UNAVAILABLE})
                    # A certificate from another CA (of an agent and an operator there).
                    for who in ("agent-a1", "operator-op"):
                        await expect(f"other CA {who}", TlsSettings(str(d / "ca.crt"), str(other / f"{who}.crt"),
                                                                    str(other / f"{who}.key")), plain, {grpc.StatusCode.UNAVAILABLE})
                    await expect("no identity", nobody, plain, {grpc.StatusCode.UNAUTHENTICATED})
                    refusals += 1
                    for role, tls in roles.items():
                        req = request_for(pb2, m, rule.get(role, ""), names[role])
                        if role not in rule:
                            await expect(f"as {role}", tls, req, {grpc.StatusCode.PERMISSION_DENIED})
                            refusals += 1
                            continue
                        if rule[role] and role == "agent":  # acting as another agent
                            await expect("as another agent", tls, request_for(pb2, m, rule[role], "a1"),
                                         {grpc.StatusCode.PERMISSION_DENIED})
                            refusals += 1
                        code = await call(addr, tls, pb2, service, m, req)
                        seen.append((service, m.name, f"as {role}", code))
                        assert code not in REFUSED, f"{service}.{m.name} as {role} (allowed) was refused: {code}"
                after = security[service].counters()
                counted = sum(after.values()) - sum(before.values())
                assert counted == refusals, f"{service}: {counted} refusals counted, {refusals} made"
        finally:
            await asrv.stop(0)
            await ssrv.stop(0)
            await csrv.stop(0)
        return seen

    with caplog.at_level(logging.WARNING, logger="wancrawl.auth"):
        seen = asyncio.run(main())
    # Every (service, method) was tried; refusals are logged once per peer, not per call.
    assert {(s, m) for s, m, _, _ in seen} == {(n, m) for pb2, n, _ in SERVICES
                                              for m in pb2.DESCRIPTOR.services_by_name[n].methods_by_name}
    logged = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    peers_per_service = {(r.split(" refused ")[0], r.split(" from ")[1].split(":")[0]) for r in logged}
    assert len(logged) == len(peers_per_service), logged


def test_an_agent_certificate_must_name_the_agent(certs, tmp_path):
    d, _ = certs
    t = tls_of(d, "agent", "a2")
    s = agent_config(tmp_path, "a1", "127.0.0.1:1", tmp_path / "hosts", "127.0.0.1", tls__ca=t.ca, tls__cert=t.cert, tls__key=t.key)

    async def main():
        create_agent(s)

    with pytest.raises(ConfigError, match="agent/a2, not agent/a1"):
        asyncio.run(main())


def test_plaintext_only_when_asked_and_warned(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(grpcutil.ENV_INSECURE, raising=False)

    async def refused():
        with pytest.raises(ConfigError, match="insecure = true"):
            create_consultant(settings_for(tmp_path))
        with pytest.raises(ConfigError, match="no TLS credentials to dial"):
            grpcutil.channel("127.0.0.1:1")
        with pytest.raises(ConfigError, match="go together"):
            create_consultant(settings_for(tmp_path, tls__ca="ca.crt"))

    asyncio.run(refused())

    async def main():
        srv, _ = create_consultant(settings_for(tmp_path, tls__insecure=True))
        await srv.start()
        await srv.stop(0)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert any("PLAINTEXT" in r.getMessage() for r in caplog.records)


def test_certificates_reload_on_sighup(certs, tmp_path):
    """A server's certificate is read again on reload: a rotated certificate (a new CA here, so
    old and new cannot be confused) is what new connections get; a broken file keeps the old."""
    d, _ = certs
    live = tmp_path / "live"
    live.mkdir()
    for f in ("ca.crt", "service-consultant.crt", "service-consultant.key"):
        (live / f).write_bytes((d / f).read_bytes())
    settings = settings_for(tmp_path, tls__ca=str(live / "ca.crt"), tls__cert=str(live / "service-consultant.crt"),
                            tls__key=str(live / "service-consultant.key"))
    new = tmp_path / "new"
    pki.init(new)
    pki.issue(new, "service", "consultant")
    pki.issue(new, "operator", "op")

    async def main():
        srv, _ = create_consultant(settings)
        await srv.start()
        try:
            assert await grpcutil.check_health(srv.address, tls=tls_of(d, "operator", "op"))
            (live / "service-consultant.key").write_text("broken")
            assert srv.security.reload() is False
            assert await grpcutil.check_health(srv.address, tls=tls_of(d, "operator", "op"))
            for f in ("ca.crt", "service-consultant.crt", "service-consultant.key"):
                (live / f).write_bytes((new / f).read_bytes())
            await srv.reload()  # what SIGHUP runs
            assert await grpcutil.check_health(srv.address, tls=tls_of(new, "operator", "op"))
            assert not await grpcutil.check_health(srv.address, tls=tls_of(d, "operator", "op"), timeout=2)
        finally:
            await srv.stop(0)

    asyncio.run(main())


def test_pki_command(tmp_path, capsys):
    d = tmp_path / "ca"
    assert pki.main(["init", str(d)]) == 0
    assert pki.main(["init", str(d)]) == 2  # never replaced by accident
    assert pki.main(["issue", str(d), "agent", "unicom-beijing", "--san", "agent1.example", "--san", "10.0.0.7"]) == 0
    assert pki.main(["issue", str(d), "agent", "bad/id"]) == 2
    assert pki.wancrawl_main(["pki", "show", str(d / "agent-unicom-beijing.crt")]) == 0
    assert "agent/unicom-beijing" in capsys.readouterr().out
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((d / "agent-unicom-beijing.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["wancrawl://agent/unicom-beijing"]
    # ... and the name of the Kademlia id its key gives (wancrawl/kademlia/xorspace.py), which peers verify.
    node_name = xorspace.id_san(xorspace.node_id_of_cert((d / "agent-unicom-beijing.crt").read_bytes()))
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "agent1.example", node_name}
    assert {str(i) for i in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.0.0.7"}
    assert (d / "agent-unicom-beijing.key").stat().st_mode & 0o077 == 0


def test_rules_table_is_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    for _pb2, name, rules in SERVICES:
        for method in rules.methods:
            assert f"{name}.{method}" in doc, f"docs/security.md does not list {name}.{method}"


def test_rules_helper():
    r = Rules("wancrawl.v1.X", {"A": {"agent": ""}})
    assert r.rule("/grpc.health.v1.Health/Check") is not None
    assert r.rule("/wancrawl.v1.Y/A") is None and r.rule("/wancrawl.v1.X/B") is None


def test_operator_flags_only_from_operators(certs, tmp_path):
    """Attack 4 (issue 21): an agent's PushUrls with `force` (refetch pages already stored) or
    `route` (seed routing) is refused; the same flags from an operator, and a plain push from
    the agent, are not."""
    d, _ = certs
    method = agent_pb2.DESCRIPTOR.services_by_name["Agent"].methods_by_name["PushUrls"]

    def push(sender: str, *, route: bool = False, force: bool = False):
        return agent_pb2.PushUrlsRequest(sender_id=sender, route=route,
                                         urls=[agent_pb2.UrlItem(url="http://x.example/", force=force)])

    async def main():
        csrv, ssrv, asrv = await _serving(tmp_path, d)
        try:
            agent, operator = tls_of(d, "agent", "a2"), tls_of(d, "operator", "op")
            got = {
                "agent route": await call(asrv.address, agent, agent_pb2, "Agent", method, push("a2", route=True)),
                "agent force": await call(asrv.address, agent, agent_pb2, "Agent", method, push("a2", force=True)),
                "agent plain": await call(asrv.address, agent, agent_pb2, "Agent", method, push("a2")),
                "operator route+force": await call(asrv.address, operator, agent_pb2, "Agent", method,
                                                   push("manager", route=True, force=True)),
            }
        finally:
            await asrv.stop(0)
            await ssrv.stop(0)
            await csrv.stop(0)
        return got

    got = asyncio.run(main())
    assert got["agent route"] == got["agent force"] == grpc.StatusCode.PERMISSION_DENIED, got
    assert got["agent plain"] not in REFUSED and got["operator route+force"] not in REFUSED, got


def test_a_request_that_does_not_parse_is_invalid_argument_past_authorization(certs, tmp_path, caplog):
    """A string that is not UTF-8 (issue 21): the caller's role is checked first (a certificate
    without an identity stays UNAUTHENTICATED), then the request is refused by name. Before, the
    authorizer read fields of what did not parse (unary: UNKNOWN and a traceback)."""
    d, _ = certs
    who = {"agent a2": tls_of(d, "agent", "a2"), "nobody": no_identity_cert(d)}
    mark = "~not-utf-8~"
    requests = {"PushUrls": agent_pb2.PushUrlsRequest(sender_id=mark),
                "HandOver": agent_pb2.HandOverRequest(sender_id=mark, host=agent_pb2.HostState(host="h.cn"))}

    async def main():
        csrv, ssrv, asrv = await _serving(tmp_path, d)
        out = {}
        try:
            for name, tls in who.items():
                async with grpcutil.channel(asrv.address, tls) as ch:
                    for method, req in requests.items():
                        raw = req.SerializeToString().replace(mark.encode(), b"\xff" * len(mark))
                        path = f"/wancrawl.v1.Agent/{method}"
                        try:
                            if method == "HandOver":
                                async def one():
                                    yield raw

                                await ch.stream_unary(path, request_serializer=bytes, response_deserializer=bytes)(
                                    one(), timeout=10)
                            else:
                                await ch.unary_unary(path, request_serializer=bytes, response_deserializer=bytes)(
                                    raw, timeout=10)
                            out[name, method] = (grpc.StatusCode.OK, "")
                        except grpc.aio.AioRpcError as exc:
                            out[name, method] = (exc.code(), exc.details())
        finally:
            await asrv.stop(0)
            await ssrv.stop(0)
            await csrv.stop(0)
        return out

    out = asyncio.run(main())
    for method in requests:
        code, details = out["agent a2", method]
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "sender_id is not valid UTF-8" in details, (method, code, details)
        assert out["nobody", method][0] == grpc.StatusCode.UNAUTHENTICATED, method
    assert not [r for r in caplog.records if r.exc_info and (r.name.startswith("grpc") or r.name == "wancrawl.grpcutil")]
