#!/usr/bin/env bash
# The robot build (docs/deploy.md, "The robot build"): builds nao-rs,
# nao-rs-guard, naoctl and nao-rs-beacon as static, stripped x86_64
# binaries (`cargo robot-build`: profile `robot`, crt-static), puts them in
# target/robot-bin/ and checks them:
#   - no NEEDED entry and no interpreter (readelf): they start on any x86_64
#     Linux, the NAO's 32-bit userland included;
#   - in an empty root (a mount and network namespace, chroot) holding only
#     the binaries, /etc/passwd, /etc/group, /proc, /dev and /tmp: `--help`
#     of each, and `nao-rs demo --seconds 3` (the virtual robot, the guard
#     and the runtime) under the kernel floor (every call newer than
#     Linux 4.4 fails with ENOSYS, testkit's `kernel-floor`).
# nao-rs-sim (the demo's virtual robot) and kernel-floor are built the same
# way for the check only, into target/robot-check/: never shipped.
# The empty-root check needs root (CI runs as root); as another user it
# says so and fails. Run from anywhere. Prints each binary's size and the
# build's time.
set -euo pipefail
cd "$(dirname "$0")/.."

PROGRAMS=(nao-rs nao-rs-guard naoctl nao-rs-beacon)
CHECK_TOOLS=(nao-rs-sim kernel-floor)
built=target/x86_64-unknown-linux-gnu/robot
# Not target/robot/: with --target, cargo keeps the host's build scripts
# and proc-macros of the profile `robot` there.
out=target/robot-bin
tools=target/robot-check

fail() {
    echo "robot build: FAILED: $*" >&2
    exit 1
}

# RUSTFLAGS would replace the alias's crt-static (cargo takes the first
# source of flags it finds): build without it.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS

echo "== cargo robot-build (+ ${CHECK_TOOLS[*]} for the check)"
t0=$(date +%s)
tool_args=()
for t in "${CHECK_TOOLS[@]}"; do tool_args+=(--bin "$t"); done
cargo robot-build "${tool_args[@]}"
t1=$(date +%s)
echo "built in $((t1 - t0)) s"

rm -rf "$out" "$tools"
mkdir -p "$out" "$tools"
for p in "${PROGRAMS[@]}"; do cp "$built/$p" "$out/"; done
for t in "${CHECK_TOOLS[@]}"; do cp "$built/$t" "$tools/"; done

echo "== static: no NEEDED entry, no interpreter"
for f in "${PROGRAMS[@]/#/$out/}" "${CHECK_TOOLS[@]/#/$tools/}"; do
    dynamic=$(readelf -dW "$f")
    if grep -q '(NEEDED)' <<<"$dynamic"; then
        fail "$f needs shared libraries: $(grep '(NEEDED)' <<<"$dynamic" | tr -s ' ' | tr '\n' ';') (was RUSTFLAGS set, or a -sys crate linked dynamically?)"
    fi
    if readelf -lW "$f" | grep -q 'INTERP'; then
        fail "$f names a loader: $(readelf -pW .interp "$f" 2>/dev/null | grep -o '/[^ ]*' | head -1)"
    fi
    awk -v n="$(basename "$f")" -v s="$(stat -c %s "$f")" 'BEGIN { printf "   %-14s %5.1f MB  static\n", n, s / 1e6 }'
done

echo "== in an empty root: --help of each, nao-rs demo under the 4.4 floor"
if [ "$(id -u)" != 0 ]; then
    fail "the empty-root check needs root (chroot, mounts, a network namespace); this is uid $(id -u)"
fi
for tool in unshare chroot ip timeout; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail "the empty-root check needs $tool (util-linux, coreutils, iproute2: apt-get install util-linux coreutils iproute2)"
done
root=$(mktemp -d /tmp/nao-rs-robot-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,etc,proc,dev,tmp}
chmod 1777 "$root/tmp"
cp "$out"/* "$root/bin/"
cp "$tools/nao-rs-sim" "$root/bin/"
printf 'root:x:0:0:root:/:/bin/nao-rs\nnao:x:1000:1000:nao:/:/bin/nao-rs\n' >"$root/etc/passwd"
printf 'root:x:0:\nhal:x:900:nao\nnao:x:1000:\n' >"$root/etc/group"
# Private mounts and network: /proc and /dev exist only in here; the demo's
# UDP stop port is on this namespace's own loopback.
unshare --mount --net --fork bash -euo pipefail -c '
    root=$1 floor=$2
    shift 2
    mount --make-rprivate /
    ip link set lo up
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    for p in "$@"; do
        timeout 10 chroot "$root" "/bin/$p" --help >"$root/tmp/help.out" 2>&1 \
            || { cat "$root/tmp/help.out"; echo "$p --help failed in the empty root" >&2; exit 1; }
        echo "   $p --help: ok ($(head -1 "$root/tmp/help.out"))"
    done
    if timeout 60 "$floor" chroot "$root" /bin/nao-rs demo --seconds 3 >"$root/tmp/demo.out" 2>&1 \
        && grep -q cycle "$root/tmp/demo.out"; then
        echo "   nao-rs demo --seconds 3 under the 4.4 floor: ok"
        echo "   (its output: target/robot-check/demo.out)"
    else
        cat "$root/tmp/demo.out"
        echo "nao-rs demo failed in the empty root under the 4.4 floor" >&2
        exit 1
    fi
' bash "$root" "$tools/kernel-floor" "${PROGRAMS[@]}" || fail "the empty-root check (above)"
cp "$root/tmp/demo.out" "$tools/demo.out" 2>/dev/null || true
echo "robot build: ok: ${PROGRAMS[*]} in $out/ ($((t1 - t0)) s to build)"
