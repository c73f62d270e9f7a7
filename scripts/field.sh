#!/usr/bin/env bash
# The field on one machine (docs/field.md): five virtual robots, each in its
# own network namespace with nao-rs-sim (SCHED_FIFO 50), the guard, the
# runtime (`--controller stand`, UDP stop 7701) and the beacon, and an
# operator namespace with nao-rs-app and a headless Chromium driven by
# Selenium, all on one bridge in a namespace of its own. No default route
# anywhere: nothing leaves the namespaces. The checks are judged by each
# robot's simulator trace and page (`naoctl status --json`), not by the
# app's page alone. Prints one line per check and `N passed, M failed`.
#
#   bash scripts/field.sh                    # build the release binaries, run every check
#   bash scripts/field.sh --bin-dir DIR      # take the binaries from DIR (no build)
#   bash scripts/field.sh --without-app      # robots only: the driver sends the stops and wakes
#                                            # itself; the page is not checked (always fails)
#
# Needs root (namespaces, real-time priority), Debian's chromium and
# chromium-driver (installed with apt-get when missing) and Python 3 with
# venv; Selenium comes from pip into target/field/venv, pinned in
# scripts/field/requirements.txt. Outputs of the last run (every log, every
# trace, a screenshot of the page) stay in target/field/run/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/target/field
RUN=$CACHE/run
VENV=$CACHE/venv
BIN_DIR=""
WITHOUT_APP=0
PREFIX=nrsf-
RIG=field
. "$ROOT"/scripts/lib/rig.sh
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) BIN_DIR=$(cd "${2:-}" 2>/dev/null && pwd) || die "--bin-dir ${2:-} is not a directory"
            shift 2 ;;
        --without-app) WITHOUT_APP=1; shift ;;
        -h|--help) sed -n 2,20p "$0"; exit 0 ;;
        *) echo "field: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

# ---- what the rig needs ------------------------------------------------------
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, SCHED_FIFO for the simulators); this is uid $(id -u): run it with sudo"
for t in ip chrt python3; do
    command -v "$t" >/dev/null 2>&1 || die "no $t on this machine (iproute2, util-linux, python3)"
done
export DEBIAN_FRONTEND=noninteractive
apt_install() { # packages...
    command -v apt-get >/dev/null 2>&1 || return 1
    log "installing $* with apt-get"
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; }
}
CHROMIUM=/usr/lib/chromium/chromium
CHROMEDRIVER=/usr/bin/chromedriver
if [ ! -x "$CHROMIUM" ] || [ ! -x "$CHROMEDRIVER" ]; then
    apt_install chromium chromium-driver || true
fi
[ -x "$CHROMIUM" ] || die "no Chromium at $CHROMIUM: install Debian's browser with \`apt-get install --no-install-recommends chromium chromium-driver\` (as root)"
[ -x "$CHROMEDRIVER" ] || die "no chromedriver at $CHROMEDRIVER: install it with \`apt-get install --no-install-recommends chromium-driver\` (as root)"

# Selenium in a venv under the cache, reinstalled when the pins change.
REQ=$ROOT/scripts/field/requirements.txt
REQ_SUM=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$REQ_SUM" ]; then
    rm -rf "$VENV"
    mkdir -p "$CACHE"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        rm -rf "$VENV"
        apt_install python3-venv || true
        python3 -m venv "$VENV" >/dev/null 2>&1 || die "python3 -m venv $VENV failed: install python3-venv (apt-get install python3-venv)"
    fi
    log "installing Selenium into $VENV (pip, pinned in scripts/field/requirements.txt)"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >"$CACHE/pip.log" 2>&1 ||
        { rm -rf "$VENV"; die "pip install -r $REQ failed (is PyPI reachable?): $(tail -n 3 "$CACHE/pip.log" | tr '\n' ' ')"; }
    echo "$REQ_SUM" >"$VENV/.requirements.sha256"
fi
"$VENV/bin/python" -c 'import selenium' 2>/dev/null || die "selenium does not import in $VENV (delete it and run again)"

# ---- the binaries --------------------------------------------------------------
BINS="nao-rs nao-rs-guard naoctl nao-rs-sim"
[ "$WITHOUT_APP" = 1 ] || BINS="$BINS nao-rs-app nao-rs-beacon"
if [ -z "$BIN_DIR" ]; then
    BIN_DIR=$ROOT/target/release
    log "building the release binaries ($BINS)"
    args=()
    for b in $BINS; do args+=(--bin "$b"); done
    cargo build --release -q "${args[@]}" >"$CACHE/build.log" 2>&1 ||
        die "cargo build --release ${args[*]} failed: $(grep -m1 -E '^error' "$CACHE/build.log" || tail -n 1 "$CACHE/build.log")"
fi
for b in $BINS; do
    [ -x "$BIN_DIR/$b" ] || die "no $b in $BIN_DIR (build it: cargo build --release --bin $b)"
done

# ---- the namespaces ----------------------------------------------------------------
# nrsf-br holds the bridge br0; nrsf-op (10.77.0.2) and nrsf-r1..r5
# (10.77.0.11-15) each hold one end of a veth pair (eth0), the other end is a
# port of br0. Nothing is created in the machine's own namespace.
existing=$(ip netns list 2>/dev/null | awk -v p="$PREFIX" 'index($1, p) == 1 {print $1}' | tr '\n' ' ')
if [ -n "$existing" ]; then
    die "network namespaces ${existing}already exist (another field is running, or one was killed): if none runs, remove them with
    for n in $existing; do ip netns pids \$n | xargs -r kill -9; ip netns del \$n; done"
fi
CREATED=()
DRIVER_PID=""
WORK=""
cleanup() {
    local rc=$? n pids
    set +e
    trap - EXIT INT TERM
    [ -n "$DRIVER_PID" ] && kill -TERM "$DRIVER_PID" 2>/dev/null && wait "$DRIVER_PID" 2>/dev/null
    # Every process in our namespaces is one the field started.
    for n in "${CREATED[@]}"; do
        pids=$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')
        [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
    done
    sleep 0.3
    for n in "${CREATED[@]}"; do
        pids=$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    for n in "${CREATED[@]}"; do
        ip netns del "$n" 2>/dev/null || log "could not delete namespace $n: ip netns del $n"
    done
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        cp -a "$WORK"/. "$RUN"/ 2>/dev/null
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'echo "FAIL rig: interrupted by a signal"; echo "0 passed, 1 failed"; exit 130' INT TERM

ns_add() {
    ip netns add "$1" || die "ip netns add $1 failed"
    CREATED+=("$1")
    ip -n "$1" link set lo up
}
BR=${PREFIX}br
ns_add "$BR"
ip -n "$BR" link add br0 type bridge && ip -n "$BR" link set br0 up || die "cannot make the bridge br0 in $BR"
port() { # namespace port-name address
    ns_add "$1"
    { ip -n "$BR" link add "$2" type veth peer name eth0 netns "$1" &&
        ip -n "$BR" link set "$2" master br0 up &&
        ip -n "$1" addr add "$3/24" broadcast 10.77.0.255 dev eth0 &&
        ip -n "$1" link set eth0 up; } || die "cannot connect $1 ($3) to the bridge"
}
port "${PREFIX}op" op 10.77.0.2
for i in 1 2 3 4 5; do port "${PREFIX}r$i" "r$i" "10.77.0.1$i"; done
for n in "${CREATED[@]}"; do
    [ -z "$(ip -n "$n" route show default)" ] || die "namespace $n has a default route"
done
log "namespaces ready: ${CREATED[*]} ($(($(date +%s) - T0)) s)"

# ---- the driver ---------------------------------------------------------------------
# The robots' directories (page, sockets, traces, logs) live on tmpfs, as
# /run does on a robot: on a disk file system a write fault on the mmapped
# page or a trace write can wait for the journal for longer than the guard's
# 60 ms beat timeout (seen here: all five runtimes taken over at once). They
# are copied to target/field/run/ when the field ends.
rm -rf "$RUN" && mkdir -p "$RUN"
[ -d /dev/shm ] && [ -w /dev/shm ] || die "no writable /dev/shm (tmpfs) for the robots' directories"
WORK=$(mktemp -d /dev/shm/nrsf-field.XXXXXX)
args=(--run-dir "$RUN" --work-dir "$WORK" --bin-dir "$BIN_DIR" --ns-prefix "$PREFIX" --python "$VENV/bin/python"
    --chromium "$CHROMIUM" --chromedriver "$CHROMEDRIVER")
[ "$WITHOUT_APP" = 1 ] && args+=(--without-app)
set +e
# Selenium finds nothing to download: the driver's path is given, and no
# network would answer anyway.
SE_OFFLINE=true SE_AVOID_STATS=true ip netns exec "${PREFIX}op" "$VENV/bin/python" -u "$ROOT/scripts/field/field.py" "${args[@]}" \
    > >(tee "$RUN/results.txt") &
DRIVER_PID=$!
wait "$DRIVER_PID"
rc=$?
DRIVER_PID=""
set -e
sleep 0.1
if ! grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$RUN/results.txt"; then
    echo "FAIL rig: the driver ended (exit $rc) without a result; see $RUN/"
    echo "0 passed, 1 failed"
    rc=1
fi
log "wall time $(($(date +%s) - T0)) s"
[ "$rc" = 0 ] || exit 1
