# The checks of scripts/naovm.sh (sourced by it): cargo nao-rs deploy, nao-rs
# doctor and the stop path, run from the host against a robot-like machine
# over ssh. One line per check ("ok|FAIL IMAGE N name: what was seen"); the
# evidence of each (the commands' output, the snapshots, the diffs, the
# journals, the console) under target/naovm/IMAGE/evidence/.
#
# deploy's verification: `deploy --verify` (nao-rs capture on the machine
# while the stand-in HAL runs and restarts, nao-rs-usbmon verify here);
# NAOVM_VERIFY=skip deploys with --skip-verify instead, and the line says so.

NAOVM_VERIFY=${NAOVM_VERIFY:-verify}
EV=""
IMG=""
T_IMG=$(date +%s)
result() { # ok|FAIL ID TEXT (and the seconds since the image's build began)
    echo "$1 $IMG $2 ${*:3} [+$(($(date +%s) - T_IMG)) s]"
    if [ "$1" = ok ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
}
# cargo nao-rs deploy, the laptop's side, through the machine's ssh config
# (target/naovm/bin/ssh: OpenSSH's client with -F target/naovm/ssh/config).
deploy() { # ARGS...
    timeout 900 "$ROOT"/target/release/cargo-nao-rs deploy --ssh "$OUT/bin/ssh" "$HOST" "$@"
}
verify_args() {
    if [ "$NAOVM_VERIFY" = verify ]; then echo --verify; else echo --skip-verify; fi
}
probe() { vssh /opt/vhead/probe.sh "$@" 2>/dev/null; }
snapshot() { # FILE: the machine's file tree (vhead/naovm/common/snapshot.sh)
    vssh /opt/vhead/snapshot.sh >"$1" 2>"$1.err" && [ -s "$1" ]
}
# "N lines differ" and the first few, or empty when the trees are equal.
tree_diff() { # BEFORE AFTER DIFF_FILE
    if cmp -s "$1" "$2"; then
        : >"$3"
        return 0
    fi
    diff "$1" "$2" >"$3" || true
    return 1
}
diff_summary() { # DIFF_FILE
    echo "$(grep -c '^[<>]' "$1") lines differ ($(grep '^[<>]' "$1" | head -n 4 | cut -c1-110 | tr '\n' ';'))"
}
tree_hash() { sha256sum <"$1" | cut -c1-16; }
last_line() { grep -v '^\s*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-200; }
status_json() { vssh naoctl status --json 2>/dev/null; }
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" | head -n 1; } # JSON KEY (first)
wait_until() { # SECONDS COMMAND...: polls every 2 s
    local end=$(($(date +%s) + $1))
    shift
    while [ "$(date +%s)" -lt "$end" ]; do
        "$@" && return 0
        sleep 2
    done
    return 1
}
hal_holds() { probe holder | grep -q '/opt/aldebaran/bin/hal'; }
nao_rs_holds() { probe holder | grep -q '/usr/local/bin/nao-rs$'; }
# The guard's take-overs of runtime OLD_PID in this boot's journal.
takeovers() { vssh "journalctl -b -u nao-rs-guard -o cat --no-pager | grep -c 'TAKE-OVER.*value: $OLD_PID,'; true" 2>/dev/null; }
runtime_restarted() { p=$(vssh systemctl show -p MainPID --value nao-rs 2>/dev/null); [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$OLD_PID" ]; }
more_takeovers() { [ "$(takeovers)" -gt "$TAKEOVERS" ]; }
reason_is() { status_json | grep -q "\"reason\":\"$1\""; }
# Reboots the machine (QEMU stays: the disks persist) and waits for ssh.
reboot_vm() { # -> 0 when the machine came back with a new boot id
    local old t
    old=$(probe boot)
    t=$(date +%s)
    vssh 'systemctl reboot' >/dev/null 2>&1 || true
    if wait_ssh 400 "$old" >/dev/null; then
        REBOOT_S=$(($(date +%s) - t))
        return 0
    fi
    return 1
}
# The services that hold the body, as the machine's systemd sees them.
units_state() {
    if [ "$IMG" = naoos ]; then
        vssh 'echo "user: $(su nao -c "XDG_RUNTIME_DIR=/run/user/1001 systemctl --user is-active hal lola naoqi" | tr "\n" " ")"; echo "system: $(systemctl is-active nao-rs-guard nao-rs nao-rs-stop.socket | tr "\n" " ")"' 2>&1 | tr '\n' ';'
    else
        vssh 'echo "system: $(systemctl is-active hal lola hulk alfand nao-rs-guard nao-rs nao-rs-stop.socket | tr "\n" " ")"' 2>&1 | tr '\n' ';'
    fi
}
evidence_of_boot() { # NAME: the journal and the board's holders of this boot
    vssh 'journalctl -b --no-pager -o short-monotonic' >"$EV/journal-$1.txt" 2>&1 || true
    { echo "holder: $(probe holder)"; echo "units: $(units_state)"; vssh 'naoctl status' 2>&1; } >"$EV/state-$1.txt" || true
}

run_checks() { # IMAGE
    IMG=$1
    EV=$OUT/$IMG/evidence
    local t0 t1 t out m s n pid new took rc
    # A check that fails says so on its line; nothing here ends the run.
    set +e
    t0=$(date +%s)
    T_IMG=$t0
    build_image "$IMG"
    t1=$(date +%s)
    start_vm "$IMG"
    if ! wait_ssh 400 >/dev/null; then
        result FAIL 0 "boot: no ssh within 400 s (console: $OUT/$IMG/console.log; last lines: $(tail -n 3 "$OUT/$IMG/console.log" | tr -d '\r' | tr '\n' ';'))"
        stop_vm
        return
    fi
    t=$(date +%s)
    log "$IMG: built in $((t1 - t0)) s, ssh $((t - t1)) s after QEMU started"
    echo "  info $IMG: image built in $((t1 - t0)) s; first boot to ssh $((t - t1)) s"

    # 1 before anything: the stand-in HAL holds the board; the tree before.
    if wait_until 120 hal_holds; then
        result ok 1 "the stand-in HAL holds the chest board ($(probe holder); $(units_state))"
    else
        result FAIL 1 "the stand-in HAL does not hold the chest board within 120 s (holder: $(probe holder); $(units_state))"
    fi
    evidence_of_boot 0-before
    snapshot "$EV/tree-0-before.txt" || result FAIL 1 "snapshot of the tree failed: $(head -c 200 "$EV/tree-0-before.txt.err")"

    # 2 deploy --dry-run changes nothing.
    out=$EV/deploy-1-dry-run.log
    deploy --dry-run $(verify_args) >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        snapshot "$EV/tree-1-after-dry-run.txt"
        if tree_diff "$EV/tree-0-before.txt" "$EV/tree-1-after-dry-run.txt" "$EV/diff-1-dry-run.txt"; then
            result ok 2 "deploy --dry-run: $(grep -c . "$out") lines printed, the tree unchanged ($(wc -l <"$EV/tree-0-before.txt") entries, hash $(tree_hash "$EV/tree-0-before.txt") before and after); the board still HAL's: $(hal_holds && echo yes || echo NO)"
        else
            result FAIL 2 "deploy --dry-run changed the tree: $(diff_summary "$EV/diff-1-dry-run.txt") (evidence: $EV/diff-1-dry-run.txt)"
        fi
    else
        result FAIL 2 "deploy --dry-run exited $rc: $(last_line "$out") (evidence: $out)"
    fi

    # 3 deploy.
    out=$EV/deploy-2-install.log
    t=$(date +%s)
    deploy $(verify_args) >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        if [ "$NAOVM_VERIFY" = verify ]; then
            n="; the capture: $(grep -m1 -E '^ *\| *(PASS|FAIL) ' "$out" | sed 's/^ *| *//' | cut -c1-150)"
        else
            n=" (the capture and its replay NOT run: --skip-verify)"
        fi
        result ok 3 "deploy $(verify_args) in $(($(date +%s) - t)) s: $(last_line "$out")$n"
    else
        result FAIL 3 "deploy $(verify_args) exited $rc after $(($(date +%s) - t)) s: $(last_line "$out") (evidence: $out)"
    fi
    evidence_of_boot 2-deployed

    # 4 reboot.
    if reboot_vm; then
        result ok 4 "reboot: ssh back after $REBOOT_S s; the board's holder $(probe holder); $(units_state)"
    else
        result FAIL 4 "reboot: no ssh within 400 s (console: $OUT/$IMG/console.log)"
        stop_vm
        return
    fi
    wait_until 60 nao_rs_holds || true
    evidence_of_boot 4-rebooted

    # 5 nao-rs doctor passes.
    out=$EV/doctor.txt
    if vssh /usr/local/bin/nao-rs doctor >"$out" 2>&1; then
        result ok 5 "nao-rs doctor exit 0: $(grep -c . "$out") lines, $(last_line "$out")"
    else
        result FAIL 5 "nao-rs doctor exited non-zero: $(grep -i -E 'fail|✗' "$out" | head -n 3 | cut -c1-120 | tr '\n' ';') (evidence: $out)"
    fi
    vssh /usr/local/bin/nao-rs doctor --json >"$EV/doctor.json" 2>&1 || true

    # 6 the boot starts tripped.
    s=$(status_json)
    echo "$s" >"$EV/status-6-boot.json"
    if echo "$s" | grep -q '"state":"tripped"' && echo "$s" | grep -q '"reason":"boot"'; then
        result ok 6 "boots tripped: naoctl status says tripped, reason boot; the board's holder $(probe holder)"
    else
        result FAIL 6 "naoctl status after the boot: $(echo "$s" | cut -c1-200)"
    fi

    # 7 the UDP stop from the host, through QEMU's forward of 127.0.0.1:UDP_PORT.
    if vssh naoctl rearm --yes >"$EV/rearm-7.txt" 2>&1 && ! reason_is boot; then
        t=$(date +%s%N)
        "$ROOT"/target/release/cargo-nao-rs stop 127.0.0.1 --port "$UDP_PORT" >"$EV/stop-7.txt" 2>&1
        if wait_until 30 reason_is udp; then
            result ok 7 "UDP stop: cargo-nao-rs stop 127.0.0.1 --port $UDP_PORT (forwarded to the machine's 7701) tripped it, reason udp, within $((($(date +%s%N) - t) / 1000000)) ms"
        else
            result FAIL 7 "UDP stop: not tripped udp 30 s after cargo-nao-rs stop 127.0.0.1 --port $UDP_PORT: $(status_json | cut -c1-200)"
        fi
    else
        result FAIL 7 "UDP stop: the re-arm before it failed: $(last_line "$EV/rearm-7.txt"); $(status_json | cut -c1-200)"
    fi

    # 8 re-arm and wake.
    if vssh 'naoctl rearm --yes && sleep 1 && nao-rs wake' >"$EV/rearm-wake-8.txt" 2>&1 &&
        s=$(status_json) && echo "$s" | grep -q '"state":"armed"'; then
        echo "$s" >"$EV/status-8-armed.json"
        result ok 8 "re-arm and wake: armed ($(last_line "$EV/rearm-wake-8.txt"))"
    else
        result FAIL 8 "re-arm and wake: $(last_line "$EV/rearm-wake-8.txt"); $(status_json | cut -c1-200)"
    fi

    # 9 take-over: SIGKILL of the runtime; the guard takes the board and
    # sends all-off (the virtual robot's trace), systemd restarts the runtime.
    pid=$(vssh systemctl show -p MainPID --value nao-rs 2>/dev/null)
    OLD_PID=$pid
    TAKEOVERS=$(takeovers)
    # What the body got before: with deploy's default controller (LoLA, no
    # program connected) the robot is limp even when armed and awake.
    m=$(probe mark)
    sleep 2
    STIFF_BEFORE=$(probe frames "$m")
    m=$(probe mark)
    vssh "kill -9 $pid" 2>/dev/null
    if [ -n "$pid" ] && [ "$pid" != 0 ] && wait_until 30 more_takeovers; then
        wait_until 30 runtime_restarted
        n=$(probe frames "$m")
        new=$(vssh systemctl show -p MainPID --value nao-rs 2>/dev/null)
        took=$(vssh "journalctl -b -u nao-rs-guard -o cat --no-pager | grep 'TAKE-OVER.*value: $pid,' | tail -n 1" 2>/dev/null | cut -c1-120)
        if echo "$n" | grep -q ', 0 stiff' && ! echo "$n" | grep -q '^0 frames'; then
            result ok 9 "take-over: kill -9 of the runtime (pid $pid): the guard's journal \"$took\"; the trace since: $n (all-off); the switch: $(status_json | field state) $(status_json | field reason); systemd restarted the runtime (pid $new); before the kill: $STIFF_BEFORE in 2 s"
        else
            result FAIL 9 "take-over: after kill -9 of pid $pid the trace has $n; $(status_json | cut -c1-160)"
        fi
    else
        result FAIL 9 "take-over: no TAKE-OVER of pid '$pid' in the guard's journal 30 s after kill -9 of it; $(status_json | cut -c1-160)"
    fi
    if [ "$IMG" = team ]; then
        # 9t the team's program started after nao-rs, its Requires=lola.service met
        # (the first "Started" of each in this boot's journal).
        vssh 'journalctl -b -o short-monotonic --no-pager | grep -E "systemd\[1\]: (Starting|Started) "' >"$EV/team-order.txt" 2>&1
        local tn th lola hulk
        tn=$(grep -m1 'Started nao-rs.service' "$EV/team-order.txt" | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
        th=$(grep -m1 'Started hulk.service' "$EV/team-order.txt" | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
        lola=$(vssh 'echo "$(systemctl show -p Id --value lola.service) $(systemctl is-active lola.service)"' 2>&1)
        hulk=$(vssh 'systemctl is-active hulk.service' 2>&1)
        if [ "$hulk" = active ] && [ -n "$tn" ] && [ -n "$th" ] && awk -v a="$th" -v b="$tn" 'BEGIN {exit !(a >= b)}'; then
            result ok 9t "the team's hulk.service (Requires=lola.service) is active, started at $th s, after nao-rs.service's first start at $tn s; lola.service is now $lola"
        else
            result FAIL 9t "the team's hulk.service: $hulk, started at ${th:-never} s, nao-rs.service first at ${tn:-never} s; lola.service: $lola (evidence: $EV/team-order.txt)"
        fi
    fi

    # 10 a second deploy changes nothing.
    snapshot "$EV/tree-10-before.txt" || true
    out=$EV/deploy-3-again.log
    deploy $(verify_args) >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        snapshot "$EV/tree-10-after.txt"
        if tree_diff "$EV/tree-10-before.txt" "$EV/tree-10-after.txt" "$EV/diff-10-again.txt"; then
            result ok 10 "a second deploy changes nothing: the tree unchanged (hash $(tree_hash "$EV/tree-10-after.txt")); it said: $(last_line "$out")"
        else
            result FAIL 10 "a second deploy changed the tree: $(diff_summary "$EV/diff-10-again.txt") (evidence: $EV/diff-10-again.txt)"
        fi
    else
        result FAIL 10 "the second deploy exited $rc: $(last_line "$out") (evidence: $out)"
    fi

    # 11 uninstall.
    out=$EV/deploy-4-uninstall.log
    deploy --uninstall >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        result ok 11 "deploy --uninstall: $(last_line "$out")"
    else
        result FAIL 11 "deploy --uninstall exited $rc: $(last_line "$out") (evidence: $out)"
    fi

    # 12 reboot.
    if reboot_vm; then
        result ok 12 "reboot: ssh back after $REBOOT_S s"
    else
        result FAIL 12 "reboot: no ssh within 400 s (console: $OUT/$IMG/console.log)"
        stop_vm
        return
    fi

    # 13 the stand-in HAL holds the board again, and nothing of nao-rs is left.
    if wait_until 120 hal_holds; then
        result ok 13 "the stand-in HAL holds the chest board again ($(probe holder); $(units_state))"
    else
        result FAIL 13 "the stand-in HAL does not hold the board 120 s after the boot (holder: $(probe holder); $(units_state))"
    fi
    evidence_of_boot 13-uninstalled
    snapshot "$EV/tree-13-after-uninstall.txt" || true
    if tree_diff "$EV/tree-0-before.txt" "$EV/tree-13-after-uninstall.txt" "$EV/diff-13-uninstall.txt"; then
        result ok 14 "nothing of nao-rs is left: the tree equals the one before the first deploy ($(wc -l <"$EV/tree-0-before.txt") entries, hash $(tree_hash "$EV/tree-0-before.txt"))"
    else
        # The files that differ, as they are now (the snapshots hold only their hashes).
        grep '^[<>] ' "$EV/diff-13-uninstall.txt" | awk '$3 == "f" {print $2}' | sort -u | while read -r f; do
            mkdir -p "$EV/after-uninstall$(dirname "$f")"
            vssh "cat '$f'" >"$EV/after-uninstall$f" 2>&1 || true
        done
        result FAIL 14 "the tree after uninstall differs from the one before deploy: $(diff_summary "$EV/diff-13-uninstall.txt") (evidence: $EV/diff-13-uninstall.txt)"
    fi
    stop_vm
    echo "  info $IMG: image built in $((t1 - t0)) s; boot, checks and power-off $(($(date +%s) - t1)) s"
    set -e
}
