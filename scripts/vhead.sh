#!/usr/bin/env bash
# The virtual head (docs/virtual-head.md): a QEMU machine whose chest board is
# a real USB device of its kernel (dummy_hcd + configfs + FunctionFS, served
# by `nao-rs-sim --functionfs`), with the release binaries of this checkout
# talking to it through libusb (`--link usb`). Runs the checks inside, brings
# the results out, prints one line per check and `N passed, M failed`.
#
#   bash scripts/vhead.sh                     # every check: both kernels, then the systemd boot
#   bash scripts/vhead.sh --kernel std        # the standard kernel only (rt: PREEMPT_RT;
#                                             # systemd: the units of config/ booted; a list: std,rt)
#   bash scripts/vhead.sh --check 2           # one check (the run of check 1 comes with it)
#   bash scripts/vhead.sh --fetch             # only fetch and build what the rig needs
#   bash scripts/vhead.sh --judge rt DIR [FIRST_DIR]
#                                             # only judge saved boots (an out-* folder, the
#                                             # second boot's first): no build, no VM, no check 4
#
# A machine that stalls (its checks' watchdog ended them, or a check it was
# asked for gave no result) is booted once more, the first boot's evidence
# kept in out-<machine>.1/; a check with no result in any boot fails
# (VHEAD_RETRY=0: no second boot).
#
# Downloads come from Debian's package archive (apt-get) only, cached with the
# builds under target/vhead/. Needs root for apt-get (as CI and the
# developers' machines run). Timings inside the VM are indicative only
# (QEMU without KVM: software emulation); the checks assert none.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/target/vhead
KERNELS="std rt systemd"
CHECKS="1 2 3 4 5"
FETCH_ONLY=0
JUDGE=()
JUDGING=0
while [ $# -gt 0 ]; do
    case "$1" in
        --kernel) KERNELS=${2//,/ }; KERNELS=${KERNELS/all/std rt systemd}; shift 2 ;;
        --check) CHECKS=${2//,/ }; shift 2 ;;
        --fetch) FETCH_ONLY=1; shift ;;
        --judge) shift; JUDGING=1; JUDGE=("$@"); KERNELS=${1:-}; break ;;
        -h|--help) sed -n 2,25p "$0"; exit 0 ;;
        *) echo "vhead: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for c in $CHECKS; do
    case "$c" in 1|2|3|4|5) ;; *) echo "vhead: --check takes 1..5, not $c" >&2; exit 2 ;; esac
done
for k in $KERNELS; do
    case "$k" in std|rt|systemd) ;; *) echo "vhead: --kernel takes std, rt, systemd or all, not $k" >&2; exit 2 ;; esac
done

RIG=vhead
. "$ROOT"/scripts/lib/rig.sh

export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_update() {
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq >/dev/null 2>&1 || log "apt-get update failed; trying with the lists there are"
        APT_UPDATED=1
    fi
}
# The candidate version of a package, empty if apt does not know it.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)' || true; }
# apt-get download into the cache (once); prints the .deb's path.
fetch_deb() {
    local pkg=$1 deb
    deb=$(ls "$CACHE"/debs/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then
        [ -n "$(candidate "$pkg")" ] || apt_update
        if ! (cd "$CACHE"/debs && apt-get download -qq "$pkg" >/dev/null 2>&1); then
            # Old package lists name versions the archive no longer has.
            apt-get update -qq >/dev/null 2>&1 || true
            if ! (cd "$CACHE"/debs && apt-get download -qq "$pkg" >/dev/null 2>&1); then
                echo "vhead: apt-get download $pkg failed (is Debian's archive reachable?)" >&2
                return 1
            fi
        fi
        deb=$(ls "$CACHE"/debs/"${pkg}"_*.deb | head -n1)
    fi
    echo "$deb"
}
host_tool() { # command package
    command -v "$1" >/dev/null 2>&1 && return 0
    apt_update
    log "installing $2 (for $1)"
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 \
        || die "cannot install $2 (needed for $1): run apt-get install $2 as root"
    command -v "$1" >/dev/null 2>&1 || die "$2 installed but $1 is still missing"
}

# ---- QEMU ------------------------------------------------------------------
# A plain install where it works; where the machine's qemu-utils (backports)
# conflicts with qemu-system-common, install every dependency but those two
# packages and run qemu from the two .debs unpacked under the cache
# (docs/virtual-head.md).
QEMU=""
QEMU_ARGS=()
ensure_qemu() {
    if command -v qemu-system-x86_64 >/dev/null 2>&1; then
        QEMU=$(command -v qemu-system-x86_64)
        return
    fi
    local local_q=$CACHE/qemu/usr/bin/qemu-system-x86_64
    if [ ! -x "$local_q" ]; then
        [ -n "$(candidate qemu-system-x86)" ] || apt_update
        local sim
        sim=$(apt-get install -s -y --no-install-recommends qemu-system-x86 2>&1) \
            || die "apt-get cannot install qemu-system-x86: $(echo "$sim" | tail -n 3 | tr '\n' ' ')"
        if ! echo "$sim" | grep -q '^Remv '; then
            log "installing qemu-system-x86"
            apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null 2>&1 \
                || die "apt-get install qemu-system-x86 failed"
            QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86 installed without qemu-system-x86_64"
            return
        fi
        # The conflict: keep the installed packages, unpack qemu beside them.
        local deps
        deps=$(echo "$sim" | awk '/^Inst / {print $2}' | grep -v -x -e qemu-system-x86 -e qemu-system-common || true)
        log "qemu-system-common conflicts with an installed package ($(echo "$sim" | awk '/^Remv/ {print $2}' | tr '\n' ' ')); installing its dependencies and unpacking qemu under $CACHE/qemu"
        if [ -n "$deps" ]; then
            # shellcheck disable=SC2086
            apt-get install -y -qq --no-install-recommends $deps >/dev/null 2>&1 \
                || die "cannot install qemu's dependencies: $deps"
        fi
        rm -rf "$CACHE"/qemu.tmp && mkdir -p "$CACHE"/qemu.tmp
        local deb
        for p in qemu-system-x86 qemu-system-common; do
            deb=$(fetch_deb $p) || die "apt-get download $p failed"
            dpkg -x "$deb" "$CACHE"/qemu.tmp
        done
        rm -rf "$CACHE"/qemu && mv "$CACHE"/qemu.tmp "$CACHE"/qemu
    fi
    QEMU=$local_q
    QEMU_ARGS=(-L "$CACHE/qemu/usr/share/qemu" -L /usr/share/seabios -L /usr/share/qemu)
}

# ---- kernels ---------------------------------------------------------------
# KDIR_<variant>: the unpacked kernel package; KVER_<variant>: its version.
MODULES="dummy_hcd libcomposite usb_f_fs usbmon virtio_blk virtio_pci"
ensure_kernel() {
    local variant=$1 meta pkg dir
    case "$variant" in std) meta=linux-image-amd64 ;; rt) meta=linux-image-rt-amd64 ;; esac
    [ -n "$(candidate "$meta")" ] || apt_update
    pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
    [ -n "$pkg" ] || die "apt does not know $meta (apt-get update?)"
    dir=$CACHE/kernel/$pkg
    if [ ! -f "$dir"/.done ]; then
        log "unpacking $pkg"
        rm -rf "$dir" && mkdir -p "$dir"
        local deb
        deb=$(fetch_deb "$pkg") || die "apt-get download $pkg failed"
        dpkg -x "$deb" "$dir"
        local ver
        ver=$(ls "$dir"/lib/modules)
        # busybox insmod takes plain .ko files.
        find "$dir"/lib/modules -name '*.ko.xz' -exec xz -d {} + 2>/dev/null || true
        find "$dir"/lib/modules -name '*.ko.zst' -exec zstd -q -d --rm {} + 2>/dev/null || true
        depmod -b "$dir" "$ver"
        touch "$dir"/.done
    fi
    eval "KDIR_$variant=\$dir"
    eval "KVER_$variant=\$(ls \"\$dir\"/lib/modules)"
}

# ---- binaries --------------------------------------------------------------
build_bins() {
    log "building the release binaries (nao-rs, nao-rs-guard, naoctl, nao-rs-sim, cargo-nao-rs, nao-rs-usbmon)"
    cargo build --release -q --bin nao-rs --bin nao-rs-guard --bin naoctl --bin nao-rs-sim --bin cargo-nao-rs --bin nao-rs-usbmon \
        || die "cargo build --release failed"
}

# Copies a dynamically linked program and the libraries ldd names into $1.
copy_with_libs() {
    local root=$1 prog=$2 dest=${3:-$2}
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$prog" "$root$dest"
    ldd "$prog" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

# ---- initramfs -------------------------------------------------------------
build_initramfs() {
    local variant=$1 kdir kver root out
    eval "kdir=\$KDIR_$variant; kver=\$KVER_$variant"
    out=$CACHE/initramfs-$variant.cpio.gz
    root=$CACHE/initramfs-$variant
    rm -rf "$root" && mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,mnt,lib/modules,out,etc}
    dpkg -x "$BUSYBOX_DEB" "$CACHE"/busybox.tmp
    cp "$CACHE"/busybox.tmp/bin/busybox "$root"/bin/busybox
    rm -rf "$CACHE"/busybox.tmp
    for a in $("$root"/bin/busybox --list); do
        [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
    done
    for b in nao-rs nao-rs-guard naoctl nao-rs-sim; do
        copy_with_libs "$root" "$ROOT/target/release/$b" "/usr/bin/$b"
        strip "$root/usr/bin/$b"
    done
    copy_with_libs "$root" "$(command -v tcpdump)" /usr/bin/tcpdump
    copy_with_libs "$root" "$(command -v chrt)" /usr/bin/chrt
    # The modules in load order.
    : >"$root"/modules.list
    for m in $MODULES; do
        modprobe -d "$kdir" -S "$kver" --show-depends "$m" || die "modprobe cannot resolve $m in $kdir"
    done 2>/dev/null | awk '/^insmod/ {print $2}' |
        while read -r ko; do
            local name
            name=lib/modules/$(basename "$ko")
            grep -qx "/$name" "$root"/modules.list && continue
            cp "$ko" "$root/$name"
            echo "/$name" >>"$root"/modules.list
        done
    grep -q dummy_hcd "$root"/modules.list || die "no dummy_hcd module in $kdir"
    cp "$ROOT"/vhead/init "$root"/init
    chmod +x "$root"/init
    install -D -m 0644 "$ROOT"/vhead/lib.sh "$root"/vhead/lib.sh
    echo "root:x:0:0:root:/:/bin/sh" >"$root"/etc/passwd
    echo "root:x:0:" >"$root"/etc/group
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
    rm -rf "$root"
    log "initramfs for $variant: $(du -h "$out" | cut -f1)"
}

# ---- the systemd image -----------------------------------------------------
# Debian's systemd, udev and kmod with every package they depend on,
# `apt-get download`ed and unpacked (no maintainer scripts: the users, the
# units and the modules are set up here), the units of config/ installed as
# docs/deploy.md says, booted as an initramfs with systemd as its init.
SYSTEMD_PKGS="systemd systemd-sysv udev kmod"
build_systemd_image() {
    local kdir kver base root out pkgs missing p
    kdir=$KDIR_std
    kver=$KVER_std
    base=$CACHE/systemd-base
    if [ ! -f "$base/.done" ]; then
        [ -n "$(candidate systemd)" ] || apt_update
        # shellcheck disable=SC2086
        pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances $SYSTEMD_PKGS 2>/dev/null | grep '^[a-z0-9]' | sort -u)
        missing=""
        for p in $pkgs; do
            ls "$CACHE"/debs/"${p}"_*.deb >/dev/null 2>&1 || missing="$missing $p"
        done
        if [ -n "$missing" ]; then
            log "downloading $(echo $missing | wc -w) packages for the systemd image"
            # shellcheck disable=SC2086
            (cd "$CACHE"/debs && apt-get download -qq $missing >/dev/null 2>&1) ||
                (apt-get update -qq >/dev/null 2>&1; cd "$CACHE"/debs && apt-get download -qq $missing >/dev/null 2>&1) ||
                die "apt-get download failed for the systemd image's packages"
        fi
        rm -rf "$base" && mkdir -p "$base"
        for p in $pkgs; do
            dpkg -x "$(ls "$CACHE"/debs/"${p}"_*.deb | head -n 1)" "$base"
        done
        touch "$base/.done"
    fi
    root=$CACHE/systemd-root
    out=$CACHE/initramfs-systemd.cpio.gz
    rm -rf "$root" && cp -a "$base" "$root" && rm -f "$root/.done"
    mkdir -p "$root"/{proc,sys,dev,run,tmp,vhead/out,vhead/bin,usr/local/bin,etc/nao-rs,etc/modules-load.d}
    # busybox fills what the image lacks (sh for the scripts, tar, awk).
    dpkg -x "$BUSYBOX_DEB" "$CACHE"/busybox.tmp
    cp "$CACHE"/busybox.tmp/bin/busybox "$root"/vhead/bin/busybox
    rm -rf "$CACHE"/busybox.tmp
    for a in $("$root"/vhead/bin/busybox --list); do
        [ -e "$root/vhead/bin/$a" ] || ln -s busybox "$root/vhead/bin/$a"
    done
    for b in nao-rs nao-rs-guard naoctl nao-rs-sim cargo-nao-rs; do
        copy_with_libs "$root" "$ROOT/target/release/$b" "/usr/local/bin/$b"
        strip "$root/usr/local/bin/$b"
    done
    # The modules, for systemd-modules-load.
    for m in $MODULES; do
        modprobe -d "$kdir" -S "$kver" --show-depends "$m" 2>/dev/null | awk '/^insmod/ {print $2}'
    done | sort -u | while read -r ko; do
        mkdir -p "$root/lib/modules/$kver/$(dirname "${ko#"$kdir"/lib/modules/"$kver"/}")"
        cp "$ko" "$root/lib/modules/$kver/${ko#"$kdir"/lib/modules/"$kver"/}"
    done
    cp "$kdir/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/" 2>/dev/null || true
    depmod -b "$root" "$kver"
    echo "$MODULES" | tr ' ' '\n' >"$root"/etc/modules-load.d/vhead.conf
    # Users and groups (docs/deploy.md: group hal, user nao in it).
    cat >"$root"/etc/passwd <<'PW'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
nao:x:1001:1001:nao:/home/nao:/bin/sh
PW
    cat >"$root"/etc/group <<'GR'
root:x:0:
nogroup:x:65534:
nao:x:1001:
hal:x:1002:nao
GR
    printf 'root:*:19000:0:99999:7:::\nnao:*:19000:0:99999:7:::\n' >"$root"/etc/shadow
    : >"$root"/etc/machine-id
    echo vhead >"$root"/etc/hostname
    # The units and files of config/, installed as docs/deploy.md says.
    install -D -m 0644 "$ROOT"/config/systemd/nao-rs-stop.socket "$root"/etc/systemd/system/nao-rs-stop.socket
    install -D -m 0644 "$ROOT"/config/systemd/nao-rs-guard.service "$root"/etc/systemd/system/nao-rs-guard.service
    install -D -m 0644 "$ROOT"/config/systemd/nao-rs.service "$root"/etc/systemd/system/nao-rs.service
    install -D -m 0644 "$ROOT"/config/tmpfiles.d/nao-rs.conf "$root"/etc/tmpfiles.d/nao-rs.conf
    install -D -m 0644 "$ROOT"/config/udev/99-nao-rs.rules "$root"/etc/udev/rules.d/99-nao-rs.rules
    install -D -m 0644 "$ROOT"/config/nao-rs.conf "$root"/etc/nao-rs/nao-rs.conf
    # The kernel floor (docs/robot-system.md): the guard, the runtime and the
    # checks run with every call newer than Linux 4.4 failing with ENOSYS.
    for u in nao-rs nao-rs-guard vhead-checks; do
        install -D -m 0644 "$ROOT"/vhead/systemd/kernel-floor.conf "$root"/etc/systemd/system/$u.service.d/kernel-floor.conf
    done
    # Under emulation the guard's limits are generous (the checks are about
    # what happens, not how fast): the settings file is the place for it.
    sed -i -e 's/^NAO_RS_BEAT_TIMEOUT_MS=.*/NAO_RS_BEAT_TIMEOUT_MS=1000/' \
        -e 's/^NAO_RS_CONFIRM_WINDOW_MS=.*/NAO_RS_CONFIRM_WINDOW_MS=1000/' "$root"/etc/nao-rs/nao-rs.conf
    install -m 0644 "$ROOT"/vhead/systemd/vhead-board.service "$ROOT"/vhead/systemd/vhead-checks.service \
        "$root"/etc/systemd/system/
    install -m 0755 "$ROOT"/vhead/systemd/board-up.sh "$ROOT"/vhead/systemd/board-bind.sh \
        "$ROOT"/vhead/systemd/checks.sh "$root"/vhead/
    install -m 0644 "$ROOT"/vhead/lib.sh "$root"/vhead/lib.sh
    mkdir -p "$root"/etc/systemd/system/multi-user.target.wants
    for u in nao-rs-guard nao-rs vhead-board vhead-checks; do
        ln -sf ../$u.service "$root"/etc/systemd/system/multi-user.target.wants/$u.service
    done
    # systemctl enable nao-rs-stop.socket (WantedBy=sockets.target).
    mkdir -p "$root"/etc/systemd/system/sockets.target.wants
    ln -sf ../nao-rs-stop.socket "$root"/etc/systemd/system/sockets.target.wants/nao-rs-stop.socket
    ln -sf /lib/systemd/system/multi-user.target "$root"/etc/systemd/system/default.target
    # No login prompts on the consoles.
    ln -sf /dev/null "$root"/etc/systemd/system/serial-getty@ttyS0.service
    ln -sf /dev/null "$root"/etc/systemd/system/getty@.service
    ln -sf /dev/null "$root"/etc/systemd/system/getty-static.service
    ln -sf /lib/systemd/systemd "$root"/init
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
    rm -rf "$root"
    log "systemd image: $(du -h "$out" | cut -f1)"
}

# ---- one boot --------------------------------------------------------------
# Boots a machine into OUT: console.log, qemu.log, qemu.exit and, under
# files/, what the VM wrote out.
run_vm() { # VARIANT OUT
    local variant=$1 out=$2 kdir kver img t start kv=$1 mem=1024 append
    [ "$variant" = systemd ] && kv=std && mem=2048
    eval "kdir=\$KDIR_$kv; kver=\$KVER_$kv"
    append="console=ttyS0 panic=-1 quiet loglevel=3 vhead.checks=${CHECKS// /,} vhead.kernel=$variant"
    [ "$variant" = systemd ] && append="console=ttyS0 panic=-1 loglevel=4 systemd.show_status=1 rdinit=/init"
    append="$append ${VHEAD_APPEND:-}"
    rm -rf "$out" && mkdir -p "$out"/files
    img=$out/out.img
    truncate -s 64M "$img"
    log "booting $kver under QEMU (TCG: 1-3 minutes)"
    # The guest's watchdog counts 360 s from the checks' start, and on a
    # loaded host the boot before them has taken 180 s: 600 s leaves its
    # outputs time to come out.
    start=$(date +%s)
    set +e
    timeout "${VHEAD_TIMEOUT:-600}" "$QEMU" "${QEMU_ARGS[@]}" -machine q35 -accel tcg -smp 2 -m $mem \
        -nic none -display none -no-reboot -monitor none \
        -serial "file:$out/console.log" \
        -kernel "$kdir/boot/vmlinuz-$kver" -initrd "$CACHE/initramfs-$variant.cpio.gz" \
        -drive "file=$img,format=raw,if=virtio" \
        -append "$append" \
        >"$out/qemu.log" 2>&1
    t=$?
    set -e
    echo "$t" >"$out/qemu.exit"
    log "$variant: the VM ran $(($(date +%s) - start)) s (qemu exit $t)"
    tar -xf "$img" -C "$out/files" 2>/dev/null || true
}

# Boots a machine and judges it; a boot that stalled or failed a check is
# booted once more, the first one's folder kept as out-<machine>.1 (as
# .ci/run does for the field): emulated by TCG on a shared VM, a machine
# may run five times slower than usual and a check's 20 s waits run out.
boot() { # VARIANT
    local variant=$1 out=$CACHE/out-$1 expected why
    expected=$(expected_checks "$variant")
    rm -rf "$out.1"
    run_vm "$variant" "$out"
    why=$(stall_of "$out" $expected)
    [ -n "$why" ] || why=$(results_of "$out" |
        awk '$1 == "FAIL" && !seen[$2]++ {f = f (f ? ", " : "") $2} END {if (f) print "check(s) " f " failed"}')
    if [ -z "$why" ] || [ "${VHEAD_RETRY:-1}" = 0 ]; then
        judge "$variant" "$expected" "$out"
        return
    fi
    mv "$out" "$out.1"
    echo "  retry $variant: the first boot stalled or failed ($why); booting it once more, its evidence kept in $out.1/ (console.log, files/); the last lines of its console:"
    console_tail "$out.1"
    log "$variant: the first boot stalled or failed; booting it once more"
    run_vm "$variant" "$out"
    judge "$variant" "$expected" "$out" "$out.1"
}

# ---- judging the boots -----------------------------------------------------
PASS=0
FAIL=0
# The checks a machine is asked to run, each of which must come out with a
# result line: on std and rt check 1 and those of --check but 4 (its half in
# the VM is check 1's capture; it is judged here); on systemd the S-checks
# of vhead/systemd/checks.sh, in the order it runs them.
expected_checks() { # VARIANT
    if [ "$1" = systemd ]; then
        grep -o 'result \(ok\|FAIL\) S[0-9]*' "$ROOT"/vhead/systemd/checks.sh | awk '!seen[$3]++ {print $3}'
    else
        printf '%s\n' 1 $CHECKS | grep -vx 4 | awk '!seen[$0]++'
    fi | tr '\n' ' '
}
# A boot's result lines, "ok|FAIL ID detail": from files/results.txt where
# the VM wrote one out, else from its console.
results_of() { # OUT
    local f=$1/console.log
    [ -f "$1/files/results.txt" ] && f=$1/files/results.txt
    tr -d '\r' 2>/dev/null <"$f" | sed -n 's/^VHEAD-RESULT //p' || true
}
ran() { results_of "$1" | awk -v c="$2" '$2 == c {f = 1} END {exit !f}'; } # OUT ID
# The console's last lines, up to the watchdog's line where it has one.
console_tail() { # OUT
    tr -d '\r' 2>/dev/null <"$1/console.log" | sed 's/\x1b\[[0-9;]*m//g' |
        awk '{print} /^vhead: watchdog:/ {exit}' | tail -n 12 | sed 's/^/    /' || true
}
# Why a boot stalled, empty if it did not: the watchdog ended its checks,
# QEMU ended before the VM said VHEAD-END, or a check it was asked for gave
# no result line.
stall_of() { # OUT EXPECTED...
    local out=$1 c w why="" missing=""
    shift
    w=$(tr -d '\r' 2>/dev/null <"$out/console.log" | grep -m1 '^vhead: watchdog:' || true)
    [ -z "$w" ] || why=${w#vhead: }
    grep -q '^VHEAD-END' "$out/console.log" 2>/dev/null ||
        why="${why:+$why; }no VHEAD-END: QEMU ended first (exit $(cat "$out/qemu.exit" 2>/dev/null || echo unknown))"
    for c; do ran "$out" "$c" || missing="$missing $c"; done
    [ -z "$missing" ] || why="${why:+$why; }no result for check(s)$missing"
    echo "$why"
}
# The verdict on a machine from its boots: a check's lines come from the
# last boot in which it ran (a check counts as passed only where it passed
# in a boot in which it ran); a check asked for with no result line in any
# boot fails, naming the boots' evidence.
judge() { # VARIANT "EXPECTED" OUT [FIRST_OUT]
    local variant=$1 expected=$2 last=$3 first=${4:-} c src ids missing="" note verdict id rest where why
    # What ended the last boot early (the missing checks are named one a line).
    # shellcheck disable=SC2086
    why=$(stall_of "$last" $expected)
    why=${why%no result for check(s)*}
    why=${why%; }
    where="$last/console.log"
    [ -z "$first" ] || where="$first/console.log and $last/console.log"
    ids=$({ printf '%s\n' $expected; results_of "$last" | awk '{print $2}'
        [ -z "$first" ] || results_of "$first" | awk '{print $2}'; } | awk 'NF && !seen[$0]++')
    for c in $ids; do
        src=""
        if ran "$last" "$c"; then
            src=$last
        elif [ -n "$first" ] && ran "$first" "$c"; then
            src=$first
        fi
        if [ -z "$src" ]; then
            echo "FAIL $variant $c not run: no result line for it in ${first:+either of }the $variant VM's boot${first:+s} (${why:-it ended its checks without it}; evidence: $where, the last lines below)"
            FAIL=$((FAIL + 1))
            missing="$missing $c"
            continue
        fi
        note=""
        [ "$src" = "$last" ] || note=" (first boot: the second gave no result for it)"
        while read -r verdict id rest; do
            echo "$verdict $variant $id $rest$note"
            if [ "$verdict" = ok ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
        done < <(results_of "$src" | awk -v c="$c" '$2 == c')
    done
    if [ -n "$missing" ]; then
        echo "  evidence $variant: the last lines of $last/console.log:"
        console_tail "$last"
    elif ! grep -q '^VHEAD-END' "$last/console.log" 2>/dev/null; then
        # Every check came out, but the VM did not: what it wrote out may be missing.
        echo "FAIL $variant rig: the VM did not finish (qemu exit $(cat "$last/qemu.exit" 2>/dev/null); see $last/console.log, $last/qemu.log)"
        tail -n 5 "$last/qemu.log" 2>/dev/null | sed 's/^/    /'
        FAIL=$((FAIL + 1))
    fi
    { tr -d '\r' 2>/dev/null <"$last/files/results.txt" || tr -d '\r' 2>/dev/null <"$last/console.log"; } |
        grep '^VHEAD-INFO ' | sed "s/^VHEAD-INFO /  info $variant: /" || true
    if [ "$variant" != systemd ] && [ "$JUDGING" = 0 ] && echo " $CHECKS " | grep -q ' 4 '; then
        src=$last
        ran "$last" 1 || { [ -z "$first" ] || ! ran "$first" 1 || src=$first; }
        check_usbmon "$variant" "$src"
    fi
}

# Check 4, the host half: the pcap the VM captured -> nao-rs-usbmon -> replay.
check_usbmon() {
    local variant=$1 out=$2 pcap rec msg reads lost
    pcap=$out/files/session.pcap
    rec=$out/session.rec
    if [ ! -s "$pcap" ]; then
        echo "FAIL $variant 4 usbmon: no capture came out of the VM ($pcap)"
        FAIL=$((FAIL + 1))
        return
    fi
    if ! msg=$("$ROOT"/target/release/nao-rs-usbmon "$pcap" "$rec" --switch tripped 2>&1); then
        echo "FAIL $variant 4 usbmon: nao-rs-usbmon $pcap failed: $(echo "$msg" | tail -n 3 | tr '\n' ' ')"
        FAIL=$((FAIL + 1))
        return
    fi
    # A read of the previous frame's answer times out only when the device
    # was late (20 ms): more than 1 in 20 means answers are being lost.
    reads=$(grep -c '^bulk_in' "$rec" || true)
    lost=$(grep -c '^bulk_in .*!timeout' "$rec" || true)
    if [ $((lost * 20)) -gt "$reads" ]; then
        echo "FAIL $variant 4 usbmon: $lost of $reads bulk reads timed out in $rec (more than 1 in 20: the device's answers are lost on the way)"
        FAIL=$((FAIL + 1))
    elif msg=$("$ROOT"/target/release/nao-rs replay "$rec" 2>&1); then
        echo "ok $variant 4 usbmon: $(du -k "$pcap" | cut -f1) KiB pcap -> $(grep -c '^bulk_out' "$rec" || true) frames ($lost of $reads reads timed out) -> replay passes ($(echo "$msg" | tail -n 1))"
        PASS=$((PASS + 1))
    else
        echo "FAIL $variant 4 usbmon: nao-rs replay $rec failed: $(echo "$msg" | tail -n 5 | tr '\n' ' ')"
        FAIL=$((FAIL + 1))
    fi
}

# ---- main ------------------------------------------------------------------
if [ "$JUDGING" = 1 ]; then
    [ "${#JUDGE[@]}" -ge 2 ] && [ -d "${JUDGE[1]}" ] && [ -z "${JUDGE[2]:-}" -o -d "${JUDGE[2]:-.}" ] ||
        { echo "vhead: --judge takes std, rt or systemd, a boot's folder and, after a retry, the first boot's folder" >&2; exit 2; }
    why=$(stall_of "${JUDGE[1]}" $(expected_checks "${JUDGE[0]}"))
    [ -z "$why" ] || echo "  stalled ${JUDGE[0]}: $why"
    judge "${JUDGE[0]}" "$(expected_checks "${JUDGE[0]}")" "${JUDGE[1]}" "${JUDGE[2]:-}"
    echo "$PASS passed, $FAIL failed"
    [ "$FAIL" = 0 ]
    exit
fi
mkdir -p "$CACHE"/debs
host_tool cpio cpio
host_tool depmod kmod
host_tool tcpdump tcpdump
ensure_qemu
BUSYBOX_DEB=$(fetch_deb busybox-static) || die "apt-get download busybox-static failed"
for k in $KERNELS; do
    if [ "$k" = systemd ]; then ensure_kernel std; else ensure_kernel "$k"; fi
done
build_bins
for k in $KERNELS; do
    if [ "$k" = systemd ]; then build_systemd_image; else build_initramfs "$k"; fi
done
log "ready in $(($(date +%s) - T0)) s (qemu: $QEMU)"
if [ "$FETCH_ONLY" = 1 ]; then
    exit 0
fi
for k in $KERNELS; do boot "$k"; done
log "wall time $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
