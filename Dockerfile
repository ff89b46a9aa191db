# One image for every wancrawl service; the compose command picks the role (consultant, agent,
# storage, manager). Built in two stages because pyasn ships no wheel: it needs a C compiler,
# which the running image does not.
#
# BASE: python:3.11-slim for users (Docker Hub). Any Debian bookworm image works too: where the
# base has no python3 (scripts/compose-e2e.sh builds one from Debian's packages with debootstrap,
# since no image registry is reachable there), Debian's python3 (3.11), venv and headers are
# installed. Either way wancrawl lives in the venv /opt/venv, first on PATH.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
RUN set -eux; pkgs="build-essential"; \
    command -v python3 >/dev/null || pkgs="$pkgs python3 python3-venv python3-dev"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Debian's venv brings pip 23.0 without `wheel`, which pyasn's and maxminddb-geolite2's setup.py builds need.
RUN pip install --no-cache-dir --upgrade pip wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY wancrawl ./wancrawl
COPY consultant ./consultant
COPY agent ./agent
COPY manager ./manager
COPY storage ./storage
COPY lab ./lab
COPY protos ./protos
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
RUN set -eux; \
    if ! command -v python3 >/dev/null; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MPLBACKEND=Agg \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels wancrawl && rm -rf /wheels
# uid 1000: a bind mount such as ./run/reports is writable for the usual first desktop user.
# /pki too: the named volume `pki` mounted there starts out as this directory (owner included), so
# the one-shot `pki` service, running as wancrawl, may write the CA and certificates into it.
RUN useradd --create-home --uid 1000 wancrawl && mkdir -p /data /reports /pki \
    && chown wancrawl:wancrawl /data /reports /pki
WORKDIR /app
# Services name their configs as /app/configs/...; they are read, never written.
COPY configs ./configs
USER wancrawl
# A named volume mounted here starts out owned by wancrawl (Docker copies the image's owner).
VOLUME ["/data"]
# consultant, storage, agents' gRPC, agents' Prometheus metrics
EXPOSE 50051 50052 50054 50061 9101
CMD ["consultant", "serve", "--config", "/app/configs/consultant-geo.toml", "--listen", "0.0.0.0:50051"]
