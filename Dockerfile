# One image for every wancrawl service; the compose command picks the role (consultant, agent,
# storage, manager). Built in two stages because pyasn ships no wheel: it needs a C compiler,
# which the running image does not.
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
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

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    MPLBACKEND=Agg \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels wancrawl && rm -rf /wheels
# uid 1000: a bind mount such as ./run/reports is writable for the usual first desktop user.
RUN useradd --create-home --uid 1000 wancrawl && mkdir -p /data /reports && chown wancrawl:wancrawl /data /reports
WORKDIR /app
# Services name their configs as /app/configs/...; they are read, never written.
COPY configs ./configs
USER wancrawl
# A named volume mounted here starts out owned by wancrawl (Docker copies the image's owner).
VOLUME ["/data"]
# consultant, storage, agents' gRPC, agents' Prometheus metrics
EXPOSE 50051 50052 50054 50061 9101
CMD ["consultant", "serve", "--config", "/app/configs/consultant-geo.toml", "--listen", "0.0.0.0:50051"]
