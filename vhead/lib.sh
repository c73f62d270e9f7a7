# The virtual head's shell helpers inside the VMs (busybox sh), sourced by
# both machines' checks: vhead/init (the std and rt machines' /init) and
# vhead/systemd/checks.sh (the systemd machine). Installed as /vhead/lib.sh.
# The sourcing script sets OUT (the folder that goes out on /dev/vda), TRACE
# (nao-rs-sim's trace), RESULTS (a file the result lines also go to, or
# empty) and defines finish (write the outputs, VHEAD-END, power off).
#
# Every wait has a deadline in seconds of uptime (wait_for), and the trace is
# read from a mark on (after): a poll costs the same whether the trace holds
# a thousand frames or thirty thousand (docs/virtual-head.md, "Stalls").
STATE=/run/vhead
mkdir -p "$STATE"

# One line per check: "VHEAD-RESULT ok|FAIL N name: detail".
result() {
    echo "VHEAD-RESULT $*"
    [ -z "$RESULTS" ] || echo "VHEAD-RESULT $*" >>"$RESULTS"
}
info() {
    echo "VHEAD-INFO $*"
    [ -z "$RESULTS" ] || echo "VHEAD-INFO $*" >>"$RESULTS"
}
# The check now running (the watchdog fails it, naming its last wait).
begin() { echo "$1" >"$STATE/check"; }
now_ms() { awk '{printf "%d\n", $1 * 1000}' /proc/uptime; }

# wait_for SECONDS COMMAND...: until COMMAND succeeds, polled every 0.2 s,
# for at most SECONDS of uptime (not a count of polls: under emulation, with
# the simulator, the guard and the runtime at SCHED_FIFO above this shell, a
# poll can take seconds). What it waits for is kept for the watchdog.
wait_for() {
    local secs=$1 start
    shift
    start=$(now_ms)
    echo "$* (up to $secs s, from uptime $((start / 1000)) s)" >"$STATE/wait"
    while :; do
        "$@" && return 0
        [ $(($(now_ms) - start)) -lt $((secs * 1000)) ] || return 1
        sleep 0.2
    done
}

# ---- the trace: one JSON line a frame, about 60 KiB a second -----------------
# A mark is the trace's size in bytes; after MARK [SKIP] prints the frames
# that began at or after it (a line cut by the mark is the frame in flight:
# left out), less the first SKIP. dd seeks to the mark: only what came after
# it is read.
mark() { stat -c %s "$TRACE" 2>/dev/null || echo 0; }
after() {
    local skip=${2:-0}
    if [ "$1" -gt 0 ] && [ -n "$(dd if="$TRACE" iflag=skip_bytes skip=$(($1 - 1)) bs=1 count=1 2>/dev/null)" ]; then
        skip=$((skip + 1))
    fi
    dd if="$TRACE" iflag=skip_bytes skip="$1" bs=64k 2>/dev/null | tail -n +$((skip + 1))
}
count_after() { after "$@" | wc -l; }
stiff_after() { after "$@" | grep -c '"all_off":false'; }
frames_past() { [ "$(count_after "$1")" -ge "$2" ]; } # MARK N: N frames since MARK
stiff_seen_after() { [ "$(stiff_after "$1")" -gt 0 ]; }
frames() { if [ -f "$TRACE" ]; then wc -l <"$TRACE"; else echo 0; fi; } # all of them (reads it whole)

# ---- processes and the page ---------------------------------------------------
alive() { [ -n "$1" ] && [ "$1" != 0 ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
dead() { ! alive "$1"; }
status_json() { naoctl status --json 2>/dev/null; }
holding() { status_json | grep -q '"holding_board":true'; }
not_holding() { status_json | grep -q '"holding_board":false'; }
tripped() { status_json | grep -q '"state":"tripped"'; }
driver_is() { status_json | grep -q "\"driver_pid\":$1[,}]"; }
woken() { nao-rs wake >/dev/null 2>&1; }
# Re-arm, then wake (a wake right after the re-arm can come before the
# runtime's cycle has seen it: tried again for 10 s).
rearm_and_wake() {
    naoctl rearm --yes >/dev/null 2>&1 || return 1
    wait_for 10 woken
}

# The watchdog: whatever hangs, the results and the logs still come out. The
# check it ends fails, naming the wait it was in; the host counts the checks
# that never ran as failed and boots the machine once more.
watchdog() { # SECONDS
    (
        sleep "$1"
        c=$(cat "$STATE/check" 2>/dev/null)
        w=$(cat "$STATE/wait" 2>/dev/null)
        echo "vhead: watchdog: the checks did not finish in $1 s (check running: ${c:-none}; its last wait: ${w:-none})"
        [ -z "$c" ] || result FAIL "$c" "watchdog: still running after $1 s of checks; its last wait: ${w:-none}"
        dmesg | tail -n 30
        ps
        finish
    ) &
}
