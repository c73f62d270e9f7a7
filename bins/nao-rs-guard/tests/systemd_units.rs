//! The robot's systemd set-up in `config/`: `systemd-analyze verify` on both
//! units where it is installed, and the rules the units must keep.

use std::path::{Path, PathBuf};
use std::process::Command;

fn config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config")
}

fn read(rel: &str) -> String {
    let p = config().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn lines(s: &str) -> Vec<&str> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// Asserts that every line of `want` is one of `text`'s lines; `name` for
/// the message.
fn assert_has_lines(name: &str, text: &str, want: &[&str]) {
    let l = lines(text);
    for w in want {
        assert!(l.contains(w), "{name} lacks `{w}`");
    }
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let probe = Command::new("systemd-analyze").arg("--version").output();
    if !matches!(probe, Ok(ref o) if o.status.success()) {
        eprintln!("SKIPPED: systemd-analyze is not installed here (CI installs systemd)");
        return;
    }
    // verify checks that ExecStart's program exists: point both units at
    // the guard binary cargo just built (the arguments are not checked).
    let exe = env!("CARGO_BIN_EXE_nao-rs-guard");
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for name in [
        "nao-rs-stop.socket",
        "nao-rs-guard.service",
        "nao-rs.service",
        "nao-rs-beacon.service",
    ] {
        let text = read(&format!("systemd/{name}"))
            .replace("/usr/local/bin/nao-rs-guard", exe)
            .replace("/usr/local/bin/nao-rs-beacon", exe)
            .replace("/usr/local/bin/nao-rs ", &format!("{exe} "));
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        units.push(p);
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Lines about the unit files themselves; systemd may also complain about
    // unrelated units of the host system, which are not ours.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("nao-rs")).collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify failed:\n{stderr}"
    );
}

#[test]
fn guard_unit_starts_first_at_fifo_40() {
    let g = read("systemd/nao-rs-guard.service");
    assert_has_lines(
        "nao-rs-guard.service",
        &g,
        &[
            "Before=nao-rs.service",
            "CPUSchedulingPolicy=fifo",
            "CPUSchedulingPriority=40",
            "LimitRTPRIO=40",
            "Restart=always",
            "RestartSec=1",
        ],
    );
    for opt in [
        "--page",
        "--link",
        "--udp-port",
        "--beat-timeout-ms",
        "--confirm-window-ms",
    ] {
        assert!(
            g.contains(opt),
            "nao-rs-guard.service's ExecStart lacks {opt}"
        );
    }
}

#[test]
fn runtime_unit_restarts_one_second_after_any_failure_at_fifo_30() {
    let r = read("systemd/nao-rs.service");
    assert_has_lines(
        "nao-rs.service",
        &r,
        &[
            "Wants=nao-rs-guard.service",
            "CPUSchedulingPolicy=fifo",
            "CPUSchedulingPriority=30",
            "LimitRTPRIO=30",
            "Restart=always",
            "RestartSec=1",
        ],
    );
    let l = lines(&r);
    assert!(
        l.iter()
            .any(|x| x.starts_with("After=") && x.contains("nao-rs-guard.service")),
        "nao-rs.service must start after the guard"
    );
    // Nothing may keep systemd from restarting after the guard's SIGKILL.
    assert!(!l.iter().any(|x| x.starts_with("RestartPreventExitStatus=")
        && x.len() > "RestartPreventExitStatus=".len()));
}

#[test]
fn tmpfiles_creates_run_nao_rs_root_hal_2770() {
    assert!(lines(&read("tmpfiles.d/nao-rs.conf")).contains(&"d /run/nao-rs 2770 root hal -"));
}

#[test]
fn udev_gives_group_hal_the_chest_board() {
    let u = read("udev/99-nao-rs.rules");
    let rule = lines(&u)
        .into_iter()
        .find(|l| l.contains("idVendor"))
        .expect("a rule");
    for want in [
        r#"ATTR{idVendor}=="ffff""#,
        r#"ATTR{idProduct}=="0006""#,
        r#"GROUP="hal""#,
        r#"MODE="0660""#,
    ] {
        assert!(rule.contains(want), "the udev rule lacks {want}");
    }
}

#[test]
fn default_settings_match_the_spec() {
    assert_has_lines(
        "config/nao-rs.conf",
        &read("nao-rs.conf"),
        &[
            "NAO_RS_PAGE=/run/nao-rs/deathswitch",
            "NAO_RS_UDP_PORT=7701",
            "NAO_RS_BEAT_TIMEOUT_MS=60",
            "NAO_RS_CONFIRM_WINDOW_MS=40",
            "NAO_RS_LINK=usb",
            // Every press stops the robot unless a team chooses `hold:MS`
            // (docs/game-day.md).
            "NAO_RS_CHEST_BUTTON=trip",
        ],
    );
    assert!(
        read("systemd/nao-rs.service").contains("--chest-button ${NAO_RS_CHEST_BUTTON}"),
        "nao-rs.service passes the chest button setting"
    );
}

/// The UDP stop port is systemd's: bound at boot by the socket unit and
/// passed to both services (one socket, one queue), named as the programs
/// look for it, with the programs' receive buffer, no SO_REUSEPORT.
#[test]
fn stop_socket_unit_is_bound_by_systemd_and_passed_to_both_services() {
    let s = read("systemd/nao-rs-stop.socket");
    assert_has_lines(
        "nao-rs-stop.socket",
        &s,
        &[
            "ListenDatagram=7701",
            "BindIPv6Only=both",
            "FileDescriptorName=nao-rs-stop",
            "ReceiveBuffer=8M",
            "Service=nao-rs-guard.service",
            "WantedBy=sockets.target",
        ],
    );
    let l = lines(&s);
    assert!(
        !l.iter().any(|x| x.starts_with("ReusePort=yes")),
        "another socket could share the port"
    );
    // ReceiveBuffer= is the programs' buffer: the page's own test
    // `the_socket_units_receive_buffer_is_the_listeners` holds the two equal.
    for unit in ["nao-rs-guard.service", "nao-rs.service"] {
        assert_has_lines(
            unit,
            &read(&format!("systemd/{unit}")),
            &["Sockets=nao-rs-stop.socket"],
        );
    }
}
