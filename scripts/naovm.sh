#!/usr/bin/env bash
# The robot-like virtual heads (docs/virtual-head.md, "The robot-like
# heads"): two QEMU machines that look like a NAO where deploying nao-rs
# meets it, each with the virtual robot's chest board on its USB bus, reached
# over ssh through QEMU's port forward on 127.0.0.1:
#   naoos  NAO OS 2.8: Debian's amd64 kernel, a 32-bit (i386) userland from
#          Debian's packages, user nao, a read-only root (writable /var,
#          /home, /tmp, /run and an /etc overlay), stand-in hal, lola and
#          naoqi as nao's user units (/nao/etc/systemd/user, aldebaran.target)
#   team   a team image: the same userland, read-write, hal.service and
#          lola.service as system units, hulk.service (Requires=lola.service),
#          alfand.service, 90-hal.rules (vendor ffff), limits.d/rt-group.conf
# On each it runs cargo nao-rs deploy (--dry-run, install, again, --uninstall),
# nao-rs doctor, the UDP stop, re-arm, wake and a take-over from the host,
# and prints one line per check and `N passed, M failed`.
#
#   bash scripts/naovm.sh                  # both images: build, boot, check
#   bash scripts/naovm.sh --image naoos    # one image (naoos or team)
#   bash scripts/naovm.sh --build          # only build the images
#   bash scripts/naovm.sh --up naoos       # build, boot and leave it running:
#                                          # ssh -F target/naovm/ssh/config naoos
#   bash scripts/naovm.sh --down           # power off the machine --up left
#   NAOVM_VERIFY=skip bash scripts/naovm.sh  # deploy --skip-verify, not --verify
#
# Needs root (mmdebstrap, chroot, apt-get) and Debian's archive; QEMU and the
# kernel come from scripts/vhead.sh --fetch (its cache, target/vhead/). The
# programs deployed are the robot build's (target/robot-bin/, built by
# scripts/robot-build.sh when missing). Evidence: target/naovm/<image>/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/target/naovm
VCACHE=$ROOT/target/vhead
IMAGES="naoos team"
ACTION=check
while [ $# -gt 0 ]; do
    case "$1" in
        --image) IMAGES=${2//,/ }; shift 2 ;;
        --build) ACTION=build; shift ;;
        --up) ACTION=up; IMAGES=${2:?--up takes an image: naoos or team}; shift 2 ;;
        --down) ACTION=down; shift ;;
        -h|--help) sed -n 2,28p "$0"; exit 0 ;;
        *) echo "naovm: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for i in $IMAGES; do
    case "$i" in naoos|team) ;; *) echo "naovm: --image takes naoos or team, not $i" >&2; exit 2 ;; esac
done

RIG=naovm
. "$ROOT"/scripts/lib/rig.sh
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$OUT"/cache "$OUT"/ssh

# ---- the machine's parts ---------------------------------------------------
# QEMU, the kernel and busybox as scripts/vhead.sh fetches them (one cache).
QEMU=""
QEMU_ARGS=()
KDIR=""
KVER=""
find_parts() {
    KDIR=$(ls -d "$VCACHE"/kernel/linux-image-*-amd64 2>/dev/null | grep -v -- '-rt-' | head -n 1 || true)
    if command -v qemu-system-x86_64 >/dev/null 2>&1; then
        QEMU=$(command -v qemu-system-x86_64)
    elif [ -x "$VCACHE/qemu/usr/bin/qemu-system-x86_64" ]; then
        QEMU=$VCACHE/qemu/usr/bin/qemu-system-x86_64
        QEMU_ARGS=(-L "$VCACHE/qemu/usr/share/qemu" -L /usr/share/seabios -L /usr/share/qemu)
    fi
    BUSYBOX_DEB=$(ls "$VCACHE"/debs/busybox-static_*.deb 2>/dev/null | head -n 1 || true)
    [ -n "$KDIR" ] && [ -f "$KDIR/.done" ] && [ -n "$QEMU" ] && [ -n "$BUSYBOX_DEB" ]
}
ensure_parts() {
    if ! find_parts; then
        log "fetching QEMU, Debian's kernel and busybox (bash scripts/vhead.sh --fetch --kernel std)"
        bash "$ROOT"/scripts/vhead.sh --fetch --kernel std >&2 || die "scripts/vhead.sh --fetch failed (above)"
        find_parts || die "scripts/vhead.sh --fetch left no QEMU, kernel or busybox under $VCACHE"
    fi
    KVER=$(ls "$KDIR"/lib/modules)
}
host_tool() { # command package
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2 (for $1)"
    { apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1; }; } ||
        die "cannot install $2 (needed for $1): run apt-get install $2 as root"
}
# The robot build (deployed) and the static simulator (the image's chest board).
ensure_robot_build() {
    local f missing=""
    for f in robot-bin/nao-rs robot-bin/nao-rs-guard robot-bin/naoctl robot-bin/nao-rs-beacon robot-check/nao-rs-sim; do
        [ -x "$ROOT/target/$f" ] || missing="$missing $f"
    done
    if [ -n "$missing" ]; then
        log "the robot build is missing ($missing): bash scripts/robot-build.sh"
        bash "$ROOT"/scripts/robot-build.sh >&2 || die "scripts/robot-build.sh failed (above)"
    fi
    if [ ! -x "$ROOT/target/release/cargo-nao-rs" ] || [ ! -x "$ROOT/target/release/nao-rs-usbmon" ]; then
        log "building cargo-nao-rs and nao-rs-usbmon (the laptop's side)"
        cargo build --release -q -p cargo-nao-rs -p nao-rs-usbmon >&2 || die "cargo build --release -p cargo-nao-rs -p nao-rs-usbmon failed"
    fi
}

# ---- the images ------------------------------------------------------------
# The userland: Debian bookworm i386 (NAO OS 2.8's is 32-bit), by mmdebstrap
# from Debian's archive, cached as a tar keyed by its package list.
PKGS="systemd,systemd-sysv,udev,kmod,dbus,libpam-systemd,openssh-server,sudo,passwd,procps,iproute2"
BASE=""
ensure_base() {
    BASE=$OUT/cache/base-i386-$(echo "$PKGS" | sha256sum | cut -c1-12).tar
    [ -s "$BASE" ] && return
    host_tool mmdebstrap mmdebstrap
    host_tool arch-test arch-test
    log "building the i386 userland (mmdebstrap --arch=i386 bookworm: $PKGS)"
    mmdebstrap --quiet --format=tar --arch=i386 --variant=apt --include="$PKGS" bookworm "$BASE.tmp" >&2 ||
        die "mmdebstrap --arch=i386 failed (above): Debian's archive reachable? i386 executable here (arch-test i386)?"
    mv "$BASE.tmp" "$BASE"
}
# The modules the machines need, beyond the initramfs's (disks): the virtual
# chest board, usbmon (nao-rs capture), the network.
MODULES_BOOT="virtio_pci virtio_blk ext4 overlay"
MODULES_ROOT="dummy_hcd libcomposite usb_f_fs usbmon virtio_net"
module_files() { # MODULE...
    local m
    for m; do
        modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" 2>/dev/null || die "modprobe cannot resolve $m in $KDIR"
    done | awk '/^insmod/ {print $2}' | awk '!seen[$0]++'
}
build_initramfs() {
    local dir=$OUT/cache/initramfs ko
    rm -rf "$dir" && mkdir -p "$dir"/{bin,proc,sys,dev,newroot,lib/modules}
    dpkg -x "$BUSYBOX_DEB" "$dir/bb"
    mv "$dir/bb/bin/busybox" "$dir/bin/busybox" && rm -rf "$dir/bb"
    for a in $("$dir"/bin/busybox --list); do [ -e "$dir/bin/$a" ] || ln -s busybox "$dir/bin/$a"; done
    ln -s bin "$dir/sbin"
    : >"$dir/modules.list"
    # shellcheck disable=SC2086
    for ko in $(module_files $MODULES_BOOT); do
        cp "$ko" "$dir/lib/modules/"
        echo "/lib/modules/$(basename "$ko")" >>"$dir/modules.list"
    done
    install -m 0755 "$ROOT"/vhead/naovm/init "$dir/init"
    (cd "$dir" && find . | cpio -o -H newc --quiet | gzip -1 >"$OUT/cache/initramfs.cpio.gz")
    rm -rf "$dir"
}
# A unit enabled as `systemctl enable` would: a symlink in TARGET.wants.
enable_unit() { # ROOT UNITDIR UNIT TARGET
    mkdir -p "$1$2/$4.wants"
    ln -sf "$2/$3" "$1$2/$4.wants/$3"
}
build_image() { # IMAGE
    local img=$1 dir=$OUT/$1 r ko rel
    r=$dir/root
    log "$img: building the image"
    rm -rf "$dir" && mkdir -p "$r" "$dir/evidence"
    tar -xf "$BASE" -C "$r"
    # Users: nao (uid 1001) with sudo; root and nao reached by one key.
    chroot "$r" groupadd -g 1001 nao
    chroot "$r" useradd -u 1001 -g nao -m -d /home/nao -s /bin/bash nao
    echo 'nao ALL=(ALL) NOPASSWD: ALL' >"$r/etc/sudoers.d/nao" && chmod 0440 "$r/etc/sudoers.d/nao"
    rm -f "$r"/etc/ssh/ssh_host_*
    cp "$OUT"/ssh/host_ed25519 "$r/etc/ssh/ssh_host_ed25519_key"
    cp "$OUT"/ssh/host_ed25519.pub "$r/etc/ssh/ssh_host_ed25519_key.pub"
    chmod 0600 "$r/etc/ssh/ssh_host_ed25519_key"
    printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
        >"$r/etc/ssh/sshd_config.d/naovm.conf"
    install -d -m 0700 "$r/root/.ssh"
    install -m 0600 "$OUT"/ssh/id_ed25519.pub "$r/root/.ssh/authorized_keys"
    install -d -m 0700 -o 1001 -g 1001 "$r/home/nao/.ssh"
    install -m 0600 -o 1001 -g 1001 "$OUT"/ssh/id_ed25519.pub "$r/home/nao/.ssh/authorized_keys"
    echo nao >"$r/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 nao\n' >"$r/etc/hosts"
    head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$r/etc/machine-id"
    echo >>"$r/etc/machine-id"
    # The network: QEMU's user network, a fixed address.
    install -D -m 0644 "$ROOT"/vhead/naovm/common/10-qemu.network "$r/etc/systemd/network/10-qemu.network"
    enable_unit "$r" /lib/systemd/system systemd-networkd.service multi-user.target
    enable_unit "$r" /lib/systemd/system systemd-networkd.socket sockets.target
    ln -sf /dev/null "$r/etc/systemd/system/serial-getty@ttyS0.service"
    ln -sf /dev/null "$r/etc/systemd/system/getty@.service"
    # The kernel's modules the root loads (the disks' come in the initramfs).
    # shellcheck disable=SC2086
    for ko in $(module_files $MODULES_ROOT $MODULES_BOOT); do
        rel=${ko#"$KDIR"/lib/modules/"$KVER"/}
        install -D -m 0644 "$ko" "$r/lib/modules/$KVER/$rel"
    done
    cp "$KDIR/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$r/lib/modules/$KVER/" 2>/dev/null || true
    depmod -b "$r" "$KVER"
    echo "$MODULES_ROOT" | tr ' ' '\n' >"$r/etc/modules-load.d/naovm.conf"
    # The virtual robot's chest board (not nao-rs's: deploy never touches it).
    install -D -m 0755 "$ROOT"/target/robot-check/nao-rs-sim "$r/opt/vhead/nao-rs-sim"
    for s in board-up board-bind; do
        sed -e '1s|.*|#!/bin/sh|' -e 's|/vhead/out|/var/vhead|g' "$ROOT/vhead/systemd/$s.sh" >"$r/opt/vhead/$s.sh"
        chmod 0755 "$r/opt/vhead/$s.sh"
    done
    install -m 0755 "$ROOT"/vhead/naovm/common/snapshot.sh "$ROOT"/vhead/naovm/common/probe.sh "$r/opt/vhead/"
    install -m 0644 "$ROOT"/vhead/naovm/common/vhead-board.service "$r/etc/systemd/system/vhead-board.service"
    enable_unit "$r" /etc/systemd/system vhead-board.service multi-user.target
    mkdir -p "$r/var/vhead"
    # The guard's limits under emulation (the drop-in says why).
    install -D -m 0644 "$ROOT"/vhead/naovm/common/guard-emulation.conf "$r/etc/systemd/system/nao-rs-guard.service.d/naovm-emulation.conf"
    mkdir -p "$r/etc/naovm"
    printf 'NAO_RS_BEAT_TIMEOUT_MS=1000\nNAO_RS_CONFIRM_WINDOW_MS=1000\n' >"$r/etc/naovm/guard-emulation.env"
    # The stand-in HAL: nao-rs's static runtime under HAL's name.
    install -D -m 0755 "$ROOT"/target/robot-bin/nao-rs "$r/opt/aldebaran/bin/hal"
    if [ "$img" = naoos ]; then
        local u=$r/nao/etc/systemd/user
        mkdir -p "$u"
        install -m 0644 "$ROOT"/vhead/naovm/naoos/{hal.service,lola.service,naoqi.service,aldebaran.target} "$u/"
        for s in hal lola naoqi; do enable_unit "$r" /nao/etc/systemd/user $s.service aldebaran.target; done
        enable_unit "$r" /nao/etc/systemd/user aldebaran.target default.target
        install -D -m 0644 "$ROOT"/vhead/naovm/naoos/user-at-nao.conf "$r/etc/systemd/system/user@1001.service.d/naovm.conf"
        mkdir -p "$r/var/lib/systemd/linger" && touch "$r/var/lib/systemd/linger/nao"
        install -m 0644 "$ROOT"/vhead/naovm/naoos/80-aldebaran-usb.rules "$r/etc/udev/rules.d/"
        printf '/dev/vda / ext4 ro 0 0\n' >"$r/etc/fstab"
        # The read-only root and the data partition (/var, /home, /etc's upper layer).
        mkdir -p "$dir/data" "$r/data"
        mv "$r/var" "$dir/data/var" && mkdir "$r/var"
        mv "$r/home" "$dir/data/home" && mkdir "$r/home"
        mkdir -p "$dir/data/etc.upper" "$dir/data/etc.work"
        mkfs.ext4 -q -F -L data -d "$dir/data" "$dir/data.img" 512M >/dev/null
        rm -rf "$dir/data"
    else
        install -m 0644 "$ROOT"/vhead/naovm/team/{hal,lola,hulk,alfand}.service "$r/etc/systemd/system/"
        for s in hal lola hulk alfand; do enable_unit "$r" /etc/systemd/system $s.service multi-user.target; done
        install -m 0644 "$ROOT"/vhead/naovm/team/90-hal.rules "$r/etc/udev/rules.d/90-hal.rules"
        install -D -m 0644 "$ROOT"/vhead/naovm/team/rt-group.conf "$r/etc/security/limits.d/rt-group.conf"
        printf '/dev/vda / ext4 rw 0 0\n' >"$r/etc/fstab"
    fi
    mkfs.ext4 -q -F -L root -d "$r" "$dir/root.img" 1G >/dev/null
    rm -rf "$r"
    log "$img: image built ($(du -sh --apparent-size "$dir"/*.img | awk '{printf "%s %s ", $2, $1}'))"
}
ensure_keys() {
    [ -s "$OUT/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C naovm-client -f "$OUT/ssh/id_ed25519"
    [ -s "$OUT/ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C naovm-host -f "$OUT/ssh/host_ed25519"
}

# ---- one machine -----------------------------------------------------------
# Ports on 127.0.0.1 for the ssh and UDP stop forwards: the first free pair.
SSH_PORT=""
UDP_PORT=""
pick_ports() {
    local p
    for p in $(seq 22220 2 22300); do
        if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q . && ! ss -Hun "sport = :$((p + 1))" 2>/dev/null | grep -q .; then
            SSH_PORT=$p
            UDP_PORT=$((p + 1))
            return
        fi
    done
    die "no free port pair on 127.0.0.1 between 22220 and 22301"
}
HOST=""
write_ssh_config() { # IMAGE
    HOST=$1
    [ "$1" = team ] && HOST=naoteam
    cat >"$OUT/ssh/config" <<EOF
# Written by scripts/naovm.sh: the running $1 machine (QEMU's forward on 127.0.0.1).
Host $HOST
    HostName 127.0.0.1
    Port $SSH_PORT
    User root
    IdentityFile $OUT/ssh/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $OUT/ssh/known_hosts
    HostKeyAlias naovm
    StrictHostKeyChecking yes
    ConnectTimeout 20
    ServerAliveInterval 10
    ServerAliveCountMax 6
    LogLevel ERROR
    # One connection for all: under emulation a new one costs 5 s (the key
    # exchange, PAM and logind's session), a multiplexed one 0.3 s.
    ControlMaster auto
    ControlPath $OUT/ssh/cm-%C
    ControlPersist 120
EOF
    echo "naovm $(cat "$OUT"/ssh/host_ed25519.pub)" >"$OUT/ssh/known_hosts"
    # The OpenSSH client deploy runs finds this config first (PATH).
    mkdir -p "$OUT/bin"
    for t in ssh scp; do
        printf '#!/bin/sh\nexec /usr/bin/%s -F %s "$@"\n' "$t" "$OUT/ssh/config" >"$OUT/bin/$t"
        chmod +x "$OUT/bin/$t"
    done
}
QPID=""
start_vm() { # IMAGE
    local img=$1 dir=$OUT/$1 layout=$1 drives
    drives=(-drive "file=$dir/root.img,format=raw,if=virtio")
    [ "$img" = naoos ] && drives+=(-drive "file=$dir/data.img,format=raw,if=virtio")
    pick_ports
    write_ssh_config "$img"
    rm -f "$dir/qemu.pid"
    log "$img: booting (ssh 127.0.0.1:$SSH_PORT, UDP stop 127.0.0.1:$UDP_PORT; console: $dir/console.log)"
    "$QEMU" "${QEMU_ARGS[@]}" -machine q35 -accel tcg -smp 1 -m 1024 \
        -display none -monitor none -serial "file:$dir/console.log" \
        -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$OUT/cache/initramfs.cpio.gz" \
        -append "console=ttyS0 rdinit=/init naovm.layout=$layout net.ifnames=0 panic=-1 loglevel=4" \
        "${drives[@]}" \
        -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22,hostfwd=udp:127.0.0.1:$UDP_PORT-:7701" \
        -device virtio-net-pci,netdev=n0,romfile= \
        -pidfile "$dir/qemu.pid" >"$dir/qemu.log" 2>&1 &
    QPID=$!
    echo "$QPID" >"$OUT/running.pid"
    echo "$img" >"$OUT/running.image"
}
stop_vm() {
    local pid
    pid=$(cat "$OUT/running.pid" 2>/dev/null || true)
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        vssh 'systemctl poweroff' >/dev/null 2>&1 || true
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill "$pid" 2>/dev/null || true
    fi
    ssh -F "$OUT/ssh/config" -O exit "$HOST" >/dev/null 2>&1 || true
    rm -f "$OUT/running.pid" "$OUT/running.image"
}
vssh() { ssh -F "$OUT/ssh/config" -o BatchMode=yes "$HOST" "$@"; }
# Waits until ssh answers (up to SECONDS), and the boot is another one than
# OLD_BOOT_ID when given. Prints the boot id.
wait_ssh() { # SECONDS [OLD_BOOT_ID]
    local end=$(($(date +%s) + $1)) id
    while [ "$(date +%s)" -lt "$end" ]; do
        if ! kill -0 "$QPID" 2>/dev/null; then
            log "QEMU ended (see $(dirname "$(readlink -f "$OUT/ssh/config")"))"
            return 1
        fi
        id=$(vssh cat /proc/sys/kernel/random/boot_id 2>/dev/null || true)
        if [ -n "$id" ] && [ "$id" != "${2:-}" ]; then
            echo "$id"
            return 0
        fi
        sleep 3
    done
    return 1
}

# ---- main ------------------------------------------------------------------
if [ "$ACTION" = down ]; then
    [ -s "$OUT/running.image" ] && HOST=$(cat "$OUT/running.image") && [ "$HOST" = team ] && HOST=naoteam
    stop_vm
    exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, chroot, apt-get); this is uid $(id -u)"
host_tool cpio cpio
host_tool mkfs.ext4 e2fsprogs
host_tool ssh openssh-client
host_tool ss iproute2
ensure_parts
ensure_robot_build
ensure_keys
ensure_base
build_initramfs
log "ready in $(($(date +%s) - T0)) s (qemu: $QEMU, kernel $KVER)"
[ -s "$OUT/running.pid" ] && kill -0 "$(cat "$OUT/running.pid")" 2>/dev/null &&
    die "a machine from an earlier run still runs (pid $(cat "$OUT/running.pid")): bash scripts/naovm.sh --down"

case "$ACTION" in
    build)
        for i in $IMAGES; do build_image "$i"; done
        exit 0
        ;;
    up)
        build_image "$IMAGES"
        start_vm "$IMAGES"
        t=$(date +%s)
        wait_ssh 400 >/dev/null || die "$IMAGES: no ssh within 400 s (console: $OUT/$IMAGES/console.log)"
        log "$IMAGES: ssh answers $(($(date +%s) - t)) s after QEMU started: ssh -F $OUT/ssh/config $HOST (bash scripts/naovm.sh --down to end it)"
        exit 0
        ;;
esac
# The checks: vhead/naovm/checks.sh.
. "$ROOT"/vhead/naovm/checks.sh
PASS=0
FAIL=0
# A machine left running by a failure of this script is ended with it.
trap '[ -s "$OUT/running.pid" ] && kill "$(cat "$OUT/running.pid")" 2>/dev/null; rm -f "$OUT/running.pid"' EXIT
for i in $IMAGES; do
    run_checks "$i"
done
log "wall time $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
