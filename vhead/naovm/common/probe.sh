#!/bin/sh
# naovm (scripts/naovm.sh): what the host's checks ask the machine, over ssh.
#   probe.sh holder          who holds the chest board: "PID EXE" of every
#                            process with its /dev/bus/usb node open ("none")
#   probe.sh mark            the virtual robot's trace's size in bytes
#   probe.sh frames MARK     frames in the trace after MARK: "N frames, S stiff"
#   probe.sh boot            the boot id
TRACE=/var/vhead/trace.jsonl
case "$1" in
    holder)
        dev=""
        for d in /sys/bus/usb/devices/*; do
            [ "$(cat "$d/idVendor" 2>/dev/null)" = ffff ] || continue
            dev=$(printf '/dev/bus/usb/%03d/%03d' "$(cat "$d/busnum")" "$(cat "$d/devnum")")
        done
        [ -n "$dev" ] || { echo "no board"; exit 0; }
        found=""
        for p in /proc/[0-9]*; do
            for f in "$p"/fd/*; do
                if [ "$(readlink "$f" 2>/dev/null)" = "$dev" ]; then
                    found="$found${found:+, }${p#/proc/} $(readlink "$p/exe")"
                    break
                fi
            done
        done
        echo "${found:-none}"
        ;;
    mark) stat -c %s "$TRACE" 2>/dev/null || echo 0 ;;
    frames)
        # A line cut by the mark is the frame in flight: left out.
        tail -c +"$(($2 + 1))" "$TRACE" | tail -n +2 >/tmp/probe.after
        echo "$(wc -l </tmp/probe.after) frames, $(grep -c '"all_off":false' /tmp/probe.after) stiff"
        rm -f /tmp/probe.after
        ;;
    boot) cat /proc/sys/kernel/random/boot_id ;;
    *) echo "probe.sh: holder, mark, frames MARK or boot, not $1" >&2; exit 2 ;;
esac
