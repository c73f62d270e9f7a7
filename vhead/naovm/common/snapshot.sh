#!/bin/sh
# naovm (scripts/naovm.sh): the file tree deploy may touch, one line a file,
# sorted: "path type mode uid:gid [size sha256 | -> target]". Two snapshots
# are equal when nothing was added, removed or changed there. Left out: the
# kernel's and the boot's own (/proc, /sys, /dev, /run, /tmp: other file
# systems), logs, caches, the journal, systemd's seeds and timestamps, the
# virtual robot's trace. A file's contents are compared by sha256 where
# deploy writes or may write (/etc, /var, /home, /root, /opt, /nao,
# /usr/local, systemd's and udev's trees); elsewhere (the system's own
# libraries and data, which nothing of nao-rs touches) by size and mtime,
# which any write changes: hashing all of /usr takes 20 s under emulation.
set -eu
export LC_ALL=C
for top in / /etc /var /home; do
    [ -d "$top" ] || continue
    find "$top" -xdev \( -path /data -o -path /lost+found -o -path /var/log -o -path /var/cache \
        -o -path /var/tmp -o -path /var/vhead -o -path /var/lib/systemd/random-seed \
        -o -path /var/lib/systemd/timers -o -path /var/lib/systemd/catalog \
        -o -path /var/lib/systemd/coredump -o -path /var/lib/sudo -o -path /var/lib/private \
        -o -path '/home/*/.cache' -o -path '/home/*/.local' -o -path '/home/*/.config/systemd/user.control' \
        -o -path /root/.cache -o -path /root/.local -o -path /etc/.pwd.lock \) -prune \
        -o -type d -printf '%p d %m %U:%G\n' \
        -o -type l -printf '%p l %m %U:%G -> %l\n' \
        -o -type f -printf '%p f %m %U:%G %s\n' \
        -o -printf '%p %y %m %U:%G\n'
done | sort -u >/tmp/snapshot.list
HASHED='^/(etc|var|home|root|opt|nao|usr/local|lib/systemd|usr/lib/systemd|lib/udev|usr/lib/udev)/'
awk '$2 == "f" {print $1}' /tmp/snapshot.list | grep -E "$HASHED" | tr '\n' '\0' | xargs -0 -r sha256sum >/tmp/snapshot.sha
awk '$2 == "f" {print $1}' /tmp/snapshot.list | grep -vE "$HASHED" | tr '\n' '\0' | xargs -0 -r stat -c '%Y %n' >/tmp/snapshot.mtime
awk 'FILENAME == ARGV[1] {sum[$2] = $1; next} FILENAME == ARGV[2] {sum[$2] = "mtime=" $1; next}
    $2 == "f" {print $0, sum[$1]; next} {print}' /tmp/snapshot.sha /tmp/snapshot.mtime /tmp/snapshot.list
rm -f /tmp/snapshot.list /tmp/snapshot.sha /tmp/snapshot.mtime
