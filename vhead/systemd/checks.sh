#!/vhead/bin/sh
# The virtual head's systemd checks (docs/virtual-head.md), run by
# vhead-checks.service once multi-user.target is reached. The units of
# config/ are installed as docs/deploy.md says; the device is
# vhead-board.service. One line per check:
#   VHEAD-RESULT ok|FAIL S<n> name: detail
# (on the console and in /vhead/out/results.txt), then the output folder goes
# out as a tar on /dev/vda and the machine powers off. Every wait is bounded.
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:/vhead/bin
OUT=/vhead/out
TRACE=$OUT/trace.jsonl
RESULTS=$OUT/results.txt
mkdir -p $OUT
: >$RESULTS
. /vhead/lib.sh
main_pid() { systemctl show -p MainPID --value "$1" 2>/dev/null; }
prop() { systemctl show -p "$2" --value "$1" 2>/dev/null; }
new_main() { p=$(main_pid nao-rs); alive "$p" && [ "$p" != "$1" ]; }
board_up() { grep -l ffff /sys/bus/usb/devices/*/idVendor >/dev/null 2>&1; }
# The runtime is up: the page's driver, and the trace has its first 30 frames.
runtime_up() { alive "$(main_pid nao-rs)" && driver_is "$(main_pid nao-rs)" && [ "$(head -n 30 "$TRACE" 2>/dev/null | wc -l)" -ge 30 ]; }
# systemctl start, stop or restart waits for its job: the units bound that
# (TimeoutStopSec=5, Type=simple), and so does this, with a message.
sctl() { # VERB UNIT
    timeout 60 systemctl "$1" "$2" || info "systemctl $1 $2 failed or did not return within 60 s (exit $?)"
}
reason_is() { status_json | grep -q "\"reason\":\"$1\""; }
# The inode of the UDP socket(s) bound to port 7701 (hex 1E15), from /proc/net.
stop_inodes() { awk '$2 ~ /:1E15$/ {print $10}' /proc/net/udp /proc/net/udp6 2>/dev/null; }
# True when process $1 holds socket inode $2.
holds() { for f in /proc/"$1"/fd/*; do [ "$(readlink "$f" 2>/dev/null)" = "socket:[$2]" ] && return 0; done; return 1; }
finish() {
    # Under load the simulator has ended on a control request it could not
    # answer (journal): every check after that has no board.
    systemctl -q is-active vhead-board ||
        info "vhead-board.service (nao-rs-sim, the chest board) ended during the checks: $(journalctl -b -u vhead-board --no-pager -o cat 2>/dev/null | tail -n 2 | tr '\n' ' ')"
    info "kernel $(uname -r); uptime $(cut -d' ' -f1 /proc/uptime) s; systemd $(systemctl --version | head -n 1)"
    systemctl --no-pager status nao-rs nao-rs-guard vhead-board >$OUT/systemctl-status.txt 2>&1
    journalctl -b --no-pager >$OUT/journal.txt 2>&1
    naoctl status >$OUT/status.txt 2>&1
    (cd $OUT && tar -cf /dev/vda .) 2>/dev/null
    sync
    echo "VHEAD-END"
    systemctl poweroff --force --force
}
watchdog 360

wait_for 60 board_up || info "the chest board did not appear within 60 s"
wait_for 90 runtime_up || info "the runtime was not cycling within 90 s of the checks' start"
info "boot to checks: $(cut -d' ' -f1 /proc/uptime) s; $(frames) frames in the trace"

# S1 tmpfiles: /run/nao-rs root:hal 2770.
got=$(stat -c '%U:%G %a' /run/nao-rs 2>&1)
if [ "$got" = "root:hal 2770" ]; then
    result ok S1 "tmpfiles: /run/nao-rs is root:hal 2770"
else
    result FAIL S1 "tmpfiles: /run/nao-rs is $got, the units promise root:hal 2770"
fi

# S2 the page starts tripped (boot).
st=$(status_json)
if echo "$st" | grep -q '"state":"tripped"' && echo "$st" | grep -q '"reason":"boot"'; then
    result ok S2 "page: tripped (boot) after the boot"
else
    result FAIL S2 "page: expected tripped (boot), naoctl status says $st"
fi

# S3 the guard is up before the runtime (their first starts, from the journal).
g=$(prop nao-rs-guard ExecMainStartTimestampMonotonic)
first_rt=$(journalctl -b -o short-monotonic --no-pager 2>/dev/null | grep -m1 'Started nao-rs.service\|Started nao-rs runtime' | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
first_g=$(journalctl -b -o short-monotonic --no-pager 2>/dev/null | grep -m1 'Started nao-rs-guard.service\|Started nao-rs guard' | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
if [ -n "$first_rt" ] && [ -n "$first_g" ] && awk "BEGIN {exit !($first_g <= $first_rt)}"; then
    result ok S3 "order: the guard started at $first_g s, the runtime at $first_rt s (journal, monotonic)"
else
    result FAIL S3 "order: guard started at '$first_g', runtime at '$first_rt' (ExecMainStartTimestampMonotonic of the guard: $g)"
fi

# S4 udev: the chest board's node is group hal, mode 0660.
f=$(grep -l ffff /sys/bus/usb/devices/*/idVendor 2>/dev/null | head -n 1)
if [ -n "$f" ]; then
    d=$(dirname "$f")
    node=/dev/bus/usb/$(printf %03d "$(cat "$d/busnum")")/$(printf %03d "$(cat "$d/devnum")")
    got=$(stat -c '%G %a' "$node" 2>&1)
    if [ "$got" = "hal 660" ]; then
        result ok S4 "udev: $node is group hal, mode 0660"
    else
        result FAIL S4 "udev: $node is $got, the rule promises hal 660"
    fi
else
    result FAIL S4 "udev: no USB device ffff:0006"
fi

# S5 the services run as user nao, not root.
nao=$(id -u nao 2>/dev/null)
bad=
for u in nao-rs-guard nao-rs; do
    p=$(main_pid $u)
    uid=$(awk '/^Uid:/ {print $2}' /proc/"$p"/status 2>/dev/null)
    gid=$(awk '/^Gid:/ {print $2}' /proc/"$p"/status 2>/dev/null)
    [ -n "$uid" ] && [ "$uid" = "$nao" ] || bad="$bad $u(pid $p uid '$uid')"
    eval "uid_$(echo $u | tr - _)=\$uid gid_$(echo $u | tr - _)=\$gid"
done
if [ -z "$bad" ]; then
    result ok S5 "users: the guard and the runtime run as nao (uid $nao), hal gid $(awk -F: '$1 == "hal" {print $3}' /etc/group) (the runtime's /proc status: $(awk '/^Groups:/' /proc/$(main_pid nao-rs)/status | tr -s "\t " " "))"
else
    result FAIL S5 "users: not nao (uid $nao):$bad"
fi

# S6 scheduling: every thread's policy and priority (from /proc), the main
# threads against the units (guard FIFO 40, runtime FIFO 30).
sched() { # PID -> "comm:policy/prio ..." (policy 1 = SCHED_FIFO)
    for t in /proc/"$1"/task/*; do
        c=$(cat "$t/comm")
        set -- $(sed 's/^.*) //' "$t/stat")
        # after "comm) ": field 3 is state; rt_priority is field 40, policy 41.
        shift 37
        echo "$c:$2/$1"
    done
}
ok6=1
det=
for pair in nao-rs-guard:40 nao-rs:30; do
    u=${pair%%:*}
    want=${pair##*:}
    p=$(main_pid "$u")
    s=$(sched "$p" | tr '\n' ' ')
    det="$det $u: $s;"
    main=${s%% *}
    [ "${main#*:}" = "1/$want" ] || ok6=
done
if [ -n "$ok6" ]; then
    result ok S6 "scheduling (thread:policy/priority, 1 = FIFO):$det"
else
    result FAIL S6 "scheduling: the main threads are not what the units promise (guard 1/40, runtime 1/30):$det"
fi

# S9 the stop socket (nao-rs-stop.socket) is bound by systemd before either
# service starts (the journal's "Listening on" before both first "Started").
listen=$(journalctl -b -o short-monotonic --no-pager 2>/dev/null | grep -m1 'Listening on nao-rs-stop.socket\|Listening on nao-rs UDP stop port' | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
sock_state=$(prop nao-rs-stop.socket ActiveState)
if [ -n "$listen" ] && [ -n "$first_g" ] && [ -n "$first_rt" ] &&
    awk "BEGIN {exit !($listen <= $first_g && $listen <= $first_rt)}" && [ "$sock_state" = active ]; then
    result ok S9 "stop socket: nao-rs-stop.socket listening at $listen s, before the guard ($first_g s) and the runtime ($first_rt s); $sock_state"
else
    result FAIL S9 "stop socket: listening at '$listen' s, guard '$first_g' s, runtime '$first_rt' s, state '$sock_state'"
fi

# S10 both services are served by it: one socket on 7701, held by systemd
# (pid 1), the guard and the runtime (/proc/PID/fd), each saying so.
inos=$(stop_inodes | tr '\n' ' ')
ino=$(stop_inodes | head -n 1)
g=$(main_pid nao-rs-guard)
r=$(main_pid nao-rs)
who=
for p in 1 "$g" "$r"; do holds "$p" "$ino" && who="$who $p"; done
g_says=$(journalctl -b -u nao-rs-guard --no-pager -o cat 2>/dev/null | grep -c "listening on systemd's socket")
r_says=$(journalctl -b -u nao-rs --no-pager -o cat 2>/dev/null | grep -c "listening on systemd's socket")
if [ "$(echo $inos | wc -w)" = 1 ] && [ "$who" = " 1 $g $r" ] && [ "$g_says" -gt 0 ] && [ "$r_says" -gt 0 ]; then
    result ok S10 "one socket on UDP 7701 (inode $ino), held by systemd, the guard (pid $g) and the runtime (pid $r); both log \"listening on systemd's socket\""
else
    result FAIL S10 "sockets on 7701: '$inos'; holders of $ino:$who (systemd 1, guard $g, runtime $r); logs: guard $g_says, runtime $r_says"
fi
info "stop socket: $(grep -h ':1E15 ' /proc/net/udp /proc/net/udp6 2>/dev/null | tr -s ' ' | head -n 2 | tr '\n' ';')"

# S12 the kernel floor (vhead/systemd/kernel-floor.conf): the guard, the
# runtime and these checks run under the seccomp filter that answers every
# call newer than Linux 4.4 with ENOSYS, and the guard's and the runtime's
# start-up facts say pidfd is absent (so every check here ran as on 4.4).
ok12=1
det=
for p in "$(main_pid nao-rs-guard)" "$(main_pid nao-rs)" $$; do
    s=$(awk '/^Seccomp:/ {print $2}' /proc/"$p"/status 2>/dev/null)
    det="$det pid $p Seccomp ${s:-?};"
    [ "$s" = 2 ] || ok12=
done
for u in nao-rs-guard nao-rs; do
    f=$(journalctl -b -u "$u" --no-pager -o cat 2>/dev/null | grep -m1 "start-up facts")
    det="$det $u: ${f:-no start-up facts};"
    echo "$f" | grep -q "pidfd absent" || ok12=
done
if [ -n "$ok12" ]; then
    result ok S12 "kernel floor: guard, runtime and checks under the 4.4 filter:$det"
else
    result FAIL S12 "kernel floor: not all under the 4.4 filter, or pidfd seen:$det"
fi

# Stand up: re-arm, wake, stiff frames (the state in which a fault matters).
# Under emulation a start-up can end with boards rejected (their handshake
# answers came too late): that runtime keeps them limp for good, so after
# 30 s without stiffness the runtime is restarted once (systemctl restart).
stand_once() {
    m=$(mark)
    rearm_and_wake || return 1
    wait_for 30 stiff_seen_after "$m"
}
stand_up() {
    stand_once && return 0
    info "no stiff frames 30 s after re-arm and wake ($(status_json | grep -o '"safety_flags":\[[^]]*\]')): restarting the runtime"
    sctl restart nao-rs
    wait_for 60 runtime_up || info "the restarted runtime was not up within 60 s"
    stand_once
}

# S7 systemctl kill -s SIGKILL nao-rs: the guard takes over, systemd restarts
# the runtime 1 s later, it gets the board back, still tripped.
begin S7
if stand_up; then
    old=$(main_pid nao-rs)
    takeovers=$(journalctl -b -u nao-rs-guard --no-pager -o cat 2>/dev/null | grep -c 'TAKE-OVER')
    t0=$(now_ms)
    systemctl kill -s SIGKILL nao-rs
    # Frames sent before the signal landed are not "after the kill":
    # count from when systemctl returned (the frame in flight excepted).
    m=$(mark)
    if wait_for 30 new_main "$old" && new=$(main_pid nao-rs) && wait_for 60 driver_is "$new" &&
        wait_for 60 not_holding && wait_for 30 frames_past "$m" 100; then
        t1=$(now_ms)
        took=$(journalctl -b -u nao-rs-guard --no-pager -o cat 2>/dev/null | grep -c 'TAKE-OVER')
        s=$(stiff_after "$m" 1)
        restart=$(prop nao-rs NRestarts)
        if [ "$took" -gt "$takeovers" ] && [ "$s" = 0 ] && tripped; then
            result ok S7 "systemctl kill -s SIGKILL nao-rs: the guard took over, systemd restarted the runtime (pid $old -> $new, NRestarts $restart), which got the board back $((t1 - t0)) ms after the kill; $(count_after "$m") frames since, none stiff, still tripped"
        else
            result FAIL S7 "systemctl kill: take-overs in the guard's journal $takeovers -> $took, $s stiff frames after the kill, tripped: $(tripped && echo yes || echo no)"
        fi
    else
        result FAIL S7 "systemctl kill: no restarted runtime holding the board within 60 s ($(status_json); MainPID $(main_pid nao-rs))"
    fi
else
    result FAIL S7 "systemctl kill: re-arm and wake brought no stiff frames"
fi

# S8 systemctl stop nao-rs: the last frame is all-off.
begin S8
if stand_up; then
    sctl stop nao-rs
    sleep 3
    last=$(tail -n 1 "$TRACE")
    if echo "$last" | grep -q '"all_off":true'; then
        result ok S8 "systemctl stop nao-rs: the last frame is all-off ($(frames) frames; guard holding: $(holding && echo yes || echo no))"
    else
        result FAIL S8 "systemctl stop nao-rs: the last frame is $last"
    fi
else
    result FAIL S8 "systemctl stop: re-arm and wake brought no stiff frames"
fi
# S11 a stop sent while the guard is SIGSTOPped and the runtime restarting
# (killed; systemd restarts it 1 s later) is not lost: it queues in
# systemd's socket and trips the switch as soon as the new runtime reads.
begin S11
sctl start nao-rs
if wait_for 60 runtime_up && naoctl rearm --yes >/dev/null 2>&1 && ! tripped; then
    gp=$(main_pid nao-rs-guard)
    old=$(main_pid nao-rs)
    kill -STOP "$gp"
    systemctl kill -s SIGKILL nao-rs
    t_send=$(now_ms)
    cargo-nao-rs stop 127.0.0.1 >/dev/null 2>&1
    sleep 0.3
    early=$(status_json | grep -o '"reason":[^,]*')
    if wait_for 30 new_main "$old" && wait_for 30 reason_is udp; then
        t_trip=$(now_ms)
        new=$(main_pid nao-rs)
        start_us=$(prop nao-rs ExecMainStartTimestampMonotonic)
        kill -CONT "$gp"
        if echo "$early" | grep -q '"udp"'; then
            result FAIL S11 "stop while no one reads: tripped udp before the restart ($early): someone else read it"
        else
            result ok S11 "stop while the guard is stopped and the runtime restarting: unread 0.3 s later ($early), tripped udp $((t_trip - t_send)) ms after the send, $((t_trip - start_us / 1000)) ms after the restarted runtime (pid $old -> $new) started"
        fi
    else
        kill -CONT "$gp"
        result FAIL S11 "stop while the guard is stopped and the runtime restarting: not tripped udp within 30 s ($(status_json); MainPID $old -> $(main_pid nao-rs))"
    fi
else
    result FAIL S11 "stop while the guard is stopped: the restarted runtime did not come up armed ($(status_json))"
fi
begin ""
finish
