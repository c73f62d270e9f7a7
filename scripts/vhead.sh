#!/usr/bin/env bash
# The virtual head (docs/virtual-head.md): a QEMU machine whose chest board is
# a real USB device of its kernel (dummy_hcd + configfs + FunctionFS, served
# by `nao-rs-sim --functionfs`), with the release binaries of this checkout
# talking to it through libusb (`--link usb`). Runs the checks inside, brings
# the results out, prints one line per check and `N passed, M failed`.
#
#   bash scripts/vhead.sh                     # every check, both kernels
#   bash scripts/vhead.sh --kernel std        # the standard kernel only (rt: PREEMPT_RT)
#   bash scripts/vhead.sh --check 2           # one check (the run of check 1 comes with it)
#   bash scripts/vhead.sh --fetch             # only fetch and build what the rig needs
#
# Downloads come from Debian's package archive (apt-get) only, cached with the
# builds under target/vhead/. Needs root for apt-get (as CI and the
# developers' machines run). Timings inside the VM are indicative only
# (QEMU without KVM: software emulation); the checks assert none.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/target/vhead
KERNELS="std rt"
CHECKS="1 2 3 4 5"
FETCH_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --kernel) KERNELS=${2/all/std rt}; shift 2 ;;
        --check) CHECKS=${2//,/ }; shift 2 ;;
        --fetch) FETCH_ONLY=1; shift ;;
        -h|--help) sed -n 2,17p "$0"; exit 0 ;;
        *) echo "vhead: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for c in $CHECKS; do
    case "$c" in 1|2|3|4|5) ;; *) echo "vhead: --check takes 1..5, not $c" >&2; exit 2 ;; esac
done
for k in $KERNELS; do
    case "$k" in std|rt) ;; *) echo "vhead: --kernel takes std, rt or all, not $k" >&2; exit 2 ;; esac
done

T0=$(date +%s)
log() { echo "vhead: $*" >&2; }
# A failure of the rig itself (no QEMU, no kernel): one failed check, loudly.
die() {
    echo "FAIL rig: $*"
    echo "0 passed, 1 failed"
    exit 1
}
mkdir -p "$CACHE"/debs

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
# (shared/notes/virtual-head.md).
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
    log "building the release binaries (nao-rs, nao-rs-guard, naoctl, nao-rs-sim)"
    cargo build --release -q --bin nao-rs --bin nao-rs-guard --bin naoctl --bin nao-rs-sim \
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
    echo "root:x:0:0:root:/:/bin/sh" >"$root"/etc/passwd
    echo "root:x:0:" >"$root"/etc/group
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
    rm -rf "$root"
    log "initramfs for $variant: $(du -h "$out" | cut -f1)"
}

# ---- one boot --------------------------------------------------------------
PASS=0
FAIL=0
boot() {
    local variant=$1 kdir kver out img t start
    eval "kdir=\$KDIR_$variant; kver=\$KVER_$variant"
    out=$CACHE/out-$variant
    rm -rf "$out" && mkdir -p "$out"/files
    img=$out/out.img
    truncate -s 64M "$img"
    log "booting $kver under QEMU (TCG: 1-3 minutes)"
    start=$(date +%s)
    set +e
    timeout 480 "$QEMU" "${QEMU_ARGS[@]}" -machine q35 -accel tcg -smp 2 -m 1024 \
        -nic none -display none -no-reboot -monitor none \
        -serial "file:$out/console.log" \
        -kernel "$kdir/boot/vmlinuz-$kver" -initrd "$CACHE/initramfs-$variant.cpio.gz" \
        -drive "file=$img,format=raw,if=virtio" \
        -append "console=ttyS0 panic=-1 quiet loglevel=3 vhead.checks=${CHECKS// /,} vhead.kernel=$variant" \
        >"$out/qemu.log" 2>&1
    t=$?
    set -e
    log "$variant: the VM ran $(($(date +%s) - start)) s (qemu exit $t)"
    tar -xf "$img" -C "$out/files" 2>/dev/null || true
    if ! grep -q '^VHEAD-END' "$out/console.log" 2>/dev/null; then
        echo "FAIL $variant rig: the VM did not finish its checks (qemu exit $t; see $out/console.log, $out/qemu.log)"
        tail -n 20 "$out/console.log" 2>/dev/null | sed 's/^/    /'
        tail -n 5 "$out/qemu.log" 2>/dev/null | sed 's/^/    /'
        FAIL=$((FAIL + 1))
    fi
    # Lines "VHEAD-RESULT ok|FAIL N name: detail" and "VHEAD-INFO ...".
    while IFS= read -r line; do
        set -- $line
        local verdict=$2
        shift 2
        echo "$verdict $variant $*"
        if [ "$verdict" = ok ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
    done < <(tr -d '\r' <"$out/console.log" | grep '^VHEAD-RESULT ' || true)
    tr -d '\r' <"$out/console.log" | grep '^VHEAD-INFO ' | sed "s/^VHEAD-INFO /  info $variant: /" || true
    if echo " $CHECKS " | grep -q ' 4 '; then
        check_usbmon "$variant" "$out"
    fi
}

# Check 4, the host half: the pcap the VM captured -> import-usbmon -> replay.
check_usbmon() {
    local variant=$1 out=$2 pcap rec msg
    pcap=$out/files/session.pcap
    rec=$out/session.rec
    if [ ! -s "$pcap" ]; then
        echo "FAIL $variant 4 usbmon: no capture came out of the VM ($pcap)"
        FAIL=$((FAIL + 1))
        return
    fi
    if ! msg=$("$ROOT"/target/release/nao-rs import-usbmon "$pcap" "$rec" --switch tripped 2>&1); then
        echo "FAIL $variant 4 usbmon: import-usbmon $pcap failed: $(echo "$msg" | tail -n 3 | tr '\n' ' ')"
        FAIL=$((FAIL + 1))
        return
    fi
    if msg=$("$ROOT"/target/release/nao-rs replay "$rec" 2>&1); then
        echo "ok $variant 4 usbmon: $(du -k "$pcap" | cut -f1) KiB pcap -> $(grep -c '^bulk_out' "$rec" || true) frames -> replay passes ($(echo "$msg" | tail -n 1))"
        PASS=$((PASS + 1))
    else
        echo "FAIL $variant 4 usbmon: nao-rs replay $rec failed: $(echo "$msg" | tail -n 5 | tr '\n' ' ')"
        FAIL=$((FAIL + 1))
    fi
}

# ---- main ------------------------------------------------------------------
host_tool cpio cpio
host_tool depmod kmod
host_tool tcpdump tcpdump
ensure_qemu
BUSYBOX_DEB=$(fetch_deb busybox-static) || die "apt-get download busybox-static failed"
for k in $KERNELS; do ensure_kernel "$k"; done
build_bins
for k in $KERNELS; do build_initramfs "$k"; done
log "ready in $(($(date +%s) - T0)) s (qemu: $QEMU)"
if [ "$FETCH_ONLY" = 1 ]; then
    exit 0
fi
for k in $KERNELS; do boot "$k"; done
log "wall time $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
