"""A small PKI for mutual TLS: one CA, and certificates that carry their role and name.

    python -m wancrawl.pki init DIR                     # DIR/ca.crt, DIR/ca.key
    python -m wancrawl.pki issue DIR agent ID           # DIR/agent-ID.crt, DIR/agent-ID.key
    python -m wancrawl.pki issue DIR agent ID --source-ip 203.0.113.7   # ... bound to that address
    python -m wancrawl.pki issue DIR operator NAME      # a person or tool: the manager, lab, CLIs
    python -m wancrawl.pki issue DIR service NAME       # the consultant, storage
    (also `wancrawl pki ...` once the project is installed)

Every certificate names its holder in a URI subject alternative name, `wancrawl://ROLE/NAME`;
that is what the services' authorization reads (wancrawl.auth). Agents and services also serve,
so theirs carry DNS/IP names for hostname verification: localhost, 127.0.0.1 and every --san.
An agent's certificate may also bind the address it connects and fetches from, as a second URI
`wancrawl://source-ip/ADDR`: the consultant locates the agent by that address (docs/security.md,
"Where an agent is"). It is a URI of its own, not an IP SAN, because the IP SANs are names the
holder serves on (every one has 127.0.0.1), not where it stands.
Keys are ECDSA P-256, written 0600.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from wancrawl.kademlia import xorspace
from wancrawl.errors import ConfigError, InvalidArgument

ROLES = ("agent", "operator", "service")
URI_PREFIX = "wancrawl://"
SOURCE_IP_PREFIX = URI_PREFIX + "source-ip/"  # not a role: parse_uri ignores it
# Agent ids and names go into a URI and file names: keep them plain.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CA_CERT, CA_KEY = "ca.crt", "ca.key"


@dataclass(frozen=True)
class Identity:
    """Who a certificate says its holder is."""

    role: str
    name: str

    def __str__(self) -> str:
        return f"{self.role}/{self.name}"


def parse_uri(uri: str) -> Identity | None:
    """`wancrawl://agent/ID` as Identity("agent", "ID"); None when it is not one of ours."""
    if not uri.startswith(URI_PREFIX):
        return None
    role, sep, name = uri[len(URI_PREFIX):].partition("/")
    if not sep or role not in ROLES or not NAME_RE.match(name):
        return None
    return Identity(role, name)


def source_ip_uri(ip: str) -> str:
    """The URI that binds an agent's source address; InvalidArgument if `ip` is not an IP."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise InvalidArgument(f"source ip {ip[:80]!r} is not an IP address") from None
    return SOURCE_IP_PREFIX + str(addr)


def source_ips_of_uris(uris: list[str]) -> set[str]:
    """The addresses bound by `wancrawl://source-ip/ADDR` URIs (normalised; malformed ones are
    skipped: only this module writes them)."""
    found = set()
    for u in uris:
        if u.startswith(SOURCE_IP_PREFIX):
            try:
                found.add(str(ipaddress.ip_address(u[len(SOURCE_IP_PREFIX):])))
            except ValueError:
                continue
    return found


def _san_uris(pem: bytes) -> list[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(san.get_values_for_type(x509.UniformResourceIdentifier))


def source_ips_of_pem(pem: bytes) -> set[str]:
    """The source addresses a PEM certificate binds (empty: none)."""
    return source_ips_of_uris(_san_uris(pem))


def identity_of_pem(pem: bytes) -> Identity | None:
    """The identity in a PEM certificate's URI SAN (None: no wancrawl URI, or several)."""
    found = {i for i in (parse_uri(u) for u in _san_uris(pem)) if i}
    return found.pop() if len(found) == 1 else None


def _write(path: Path, data: bytes, private: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def init(directory: str | Path, *, days: int = 3650, force: bool = False, name: str = "wancrawl CA") -> Path:
    """Create a CA in `directory` (ca.crt, ca.key); refuses to replace one unless `force`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = Path(directory)
    if (d / CA_KEY).exists() and not force:
        raise ConfigError(f"{d / CA_KEY} exists: a CA is already there (--force replaces it, and every certificate it signed stops working)")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(d / CA_KEY, _key_pem(key), private=True)
    _write(d / CA_CERT, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return d / CA_CERT


def issue(directory: str | Path, role: str, name: str, *, sans: list[str] | tuple[str, ...] = (), days: int = 825,
          out: str | Path | None = None, source_ip: str = "") -> tuple[Path, Path]:
    """Issue a certificate for ROLE/NAME signed by the CA in `directory`; returns (cert, key)
    paths, `ROLE-NAME.crt` and `.key` in `out` (default: the CA's directory). `source_ip` (agents
    only) binds the address the agent connects and fetches from."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if role not in ROLES:
        raise InvalidArgument(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not NAME_RE.match(name):
        raise InvalidArgument(f"{role} name {name[:80]!r}: letters, digits, '.', '_' and '-' only (at most 128, first a letter or digit)")
    if source_ip and role != "agent":
        raise InvalidArgument(f"--source-ip binds an agent's address; a {role} certificate carries none")
    bound = source_ip_uri(source_ip) if source_ip else ""
    d = Path(directory)
    try:
        ca_key = serialization.load_pem_private_key((d / CA_KEY).read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate((d / CA_CERT).read_bytes())
    except FileNotFoundError as exc:
        raise ConfigError(f"no CA in {d} ({exc.filename} missing): `pki init {d}` first") from None
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(f"{URI_PREFIX}{role}/{name}")]
    if role == "agent":
        # The agent's Kademlia id is the hash of this key (wancrawl/kademlia/xorspace.py): a peer dialing
        # the node by its id asks TLS for this name, so an address cannot answer for another id.
        spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        names.append(x509.DNSName(xorspace.id_san(xorspace.node_id_of_spki(spki))))
    if bound:
        names.append(x509.UniformResourceIdentifier(bound))
    if role != "operator":  # servers: names clients verify
        for s in ("localhost", "127.0.0.1", *sans):
            try:
                gn: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(s))
            except ValueError:
                gn = x509.DNSName(s)
            if gn not in names:
                names.append(gn)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([] if role == "operator" else [ExtendedKeyUsageOID.SERVER_AUTH])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                                 x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)  # type: ignore[arg-type]
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    o = Path(out) if out else d
    crt, k = o / f"{role}-{name}.crt", o / f"{role}-{name}.key"
    _write(k, _key_pem(key), private=True)
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return crt, k


def setup(directory: str | Path, *, services: list[str] = (), operators: list[str] = (),  # type: ignore[assignment]
          agents_dir: str | Path | None = None) -> list[Path]:
    """A CA in `directory` unless there is one, then every named certificate not there yet:
    services (their name is their DNS name too), operators, and one agent per config in
    `agents_dir` (its agent_id, with the host of its `advertise` address as a name and its
    `source_ip`, when it sets one, bound)."""
    import tomllib

    d = Path(directory)
    made: list[Path] = []
    if not (d / CA_KEY).exists():
        made.append(init(d))
    wanted: list[tuple[str, str, list[str], str]] = [("service", n, [n], "") for n in services]
    wanted += [("operator", n, [], "") for n in operators]
    if agents_dir:
        for cfg in sorted(Path(agents_dir).glob("*.toml")):
            data = tomllib.loads(cfg.read_text())
            host = str(data.get("advertise", "")).rpartition(":")[0]
            source = str(data.get("source_ip", "") or data.get("fetch", {}).get("source_ip", ""))
            wanted.append(("agent", str(data["agent_id"]), [host] if host else [], source))
    for role, name, sans, source in wanted:
        if not (d / f"{role}-{name}.crt").exists():
            made.append(issue(d, role, name, sans=sans, source_ip=source)[0])
    return made


def wancrawl_parser() -> argparse.ArgumentParser:
    """`wancrawl pki ...` (the console command)."""
    p = argparse.ArgumentParser(prog="wancrawl")
    sub = p.add_subparsers(dest="tool", required=True)
    sub.add_parser("pki", parents=[parser("wancrawl pki")], add_help=False, help="CA and certificates for mutual TLS")
    return p


def tls_table(directory: str | Path, role: str, name: str) -> str:
    """The `[tls]` TOML table of a config using ROLE/NAME's certificate from `directory`."""
    d = Path(directory).resolve()
    return f'[tls]\nca = "{d / CA_CERT}"\ncert = "{d / f"{role}-{name}.crt"}"\nkey = "{d / f"{role}-{name}.key"}"\n'


def parser(prog: str = "python -m wancrawl.pki") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="wancrawl PKI: a CA and role certificates for mutual TLS")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init", help="create a CA (DIR/ca.crt, DIR/ca.key)")
    i.add_argument("dir")
    i.add_argument("--days", type=int, default=3650)
    i.add_argument("--force", action="store_true", help="replace an existing CA")
    s = sub.add_parser("issue", help="issue a certificate: agent ID, operator NAME or service NAME")
    s.add_argument("dir", help="the CA's directory")
    s.add_argument("role", choices=ROLES)
    s.add_argument("name", help="the agent id, the operator's or the service's name")
    s.add_argument("--san", action="append", default=[], help="another DNS name or IP the holder serves on (repeatable)")
    s.add_argument("--source-ip", default="", help="agents: bind the address the agent connects and fetches from; "
                                                  "the consultant locates it there and refuses another (docs/security.md)")
    s.add_argument("--days", type=int, default=825)
    s.add_argument("--out", help="directory for the certificate and key (default: DIR)")
    st = sub.add_parser("setup", help="idempotent: a CA if DIR has none, and each named certificate it lacks "
                                      "(docker-compose's one-shot pki service)")
    st.add_argument("dir")
    st.add_argument("--service", action="append", default=[], help="a service name, also its DNS name (repeatable)")
    st.add_argument("--operator", action="append", default=[], help="an operator name (repeatable)")
    st.add_argument("--agents-dir", help="agent configs (*.toml): one certificate per agent_id, for its advertised host")
    sh = sub.add_parser("show", help="print the identity a certificate carries")
    sh.add_argument("cert")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m wancrawl.pki") -> int:
    args = parser(prog).parse_args(argv)
    try:
        if args.cmd == "init":
            print(init(args.dir, days=args.days, force=args.force))
        elif args.cmd == "issue":
            crt, key = issue(args.dir, args.role, args.name, sans=args.san, days=args.days, out=args.out,
                             source_ip=args.source_ip)
            print(crt)
            print(key)
        elif args.cmd == "setup":
            for path in setup(args.dir, services=args.service, operators=args.operator, agents_dir=args.agents_dir):
                print(path)
        else:
            pem = Path(args.cert).read_bytes()
            ident = identity_of_pem(pem)
            bound = "".join(f" (source ip {ip})" for ip in sorted(source_ips_of_pem(pem)))
            print(f"{ident}{bound}" if ident else "no wancrawl identity in this certificate")
            return 0 if ident else 1
    except (ConfigError, InvalidArgument, OSError, ValueError) as exc:
        print(f"pki {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


def wancrawl_main(argv: list[str] | None = None) -> int:
    """The `wancrawl` console command: `wancrawl pki ...`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "pki":
        print("usage: wancrawl pki {init,issue,show} ...", file=sys.stderr)
        return 2
    return main(argv[1:], prog="wancrawl pki")


if __name__ == "__main__":
    sys.exit(main())
