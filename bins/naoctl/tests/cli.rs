//! naoctl end to end, on a page under a private temp dir
//! (`NAO_RS_DEATHSWITCH`), as docs/naoctl.md describes it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use deathswitch::{Beat, Motion, Page, Reason, Switch};
use serde_json::Value;

mod common;
use common::{env, naoctl, text, NAOCTL};

/// `naoctl status --json` whatever its exit code: the object and the code.
fn status_json_any(page: &Path) -> (Value, Option<i32>) {
    let out = naoctl(page, &["status", "--json"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (v, out.status.code())
}

/// `naoctl status --json` reads the page as tripped page-lost with
/// `damage`, exit code 1.
fn assert_status_page_lost(page: &Path, damage: &str) {
    let (v, code) = status_json_any(page);
    assert_eq!(code, Some(1));
    assert_eq!(v["state"], "tripped");
    assert_eq!(v["reason"], "page-lost");
    assert_eq!(v["damage"], damage);
}

fn status_json(page: &Path) -> Value {
    let out = naoctl(page, &["status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim_end().lines().count(), 1, "one line: {text}");
    serde_json::from_str(&text).unwrap()
}

/// `naoctl ARGS` on `page`, which must succeed: its output as text.
fn naoctl_ok(page: &Path, args: &[&str]) -> String {
    let out = naoctl(page, args);
    assert!(out.status.success(), "naoctl {args:?}: {out:?}");
    text(&out)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn stop_creates_a_0660_page_tripped_boot_under_umask_077() {
    let e = env();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$0\" stop")
        .arg(NAOCTL)
        .env("NAO_RS_DEATHSWITCH", &e.page)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = status_json(&e.page);
    assert_eq!(v["state"], "tripped");
    assert_eq!(
        v["reason"], "boot",
        "a new page starts tripped boot; the first reason stays"
    );
    let mode = std::fs::metadata(&e.page).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
}

#[test]
fn rearm_yes_arms_and_stop_trips_with_reason_naoctl() {
    let e = env();
    drop(Page::open(&e.page).unwrap());
    assert_eq!(status_json(&e.page)["reason"], "boot");
    let t = naoctl_ok(&e.page, &["rearm", "--yes"]);
    assert!(t.contains("stays limp") && t.contains("nao-rs wake"), "{t}");
    let v = status_json(&e.page);
    assert_eq!(v["state"], "armed");
    assert_eq!(v["reason"], Value::Null);
    naoctl_ok(&e.page, &["stop"]);
    let v = status_json(&e.page);
    assert_eq!(v["state"], "tripped");
    assert_eq!(v["reason"], "naoctl");
}

#[test]
fn a_page_truncated_to_8_bytes_reads_tripped_page_lost_and_stop_makes_it_whole() {
    let e = env();
    naoctl(&e.page, &["rearm", "--yes"]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&e.page)
        .unwrap();
    f.set_len(8).unwrap();
    drop(f);
    // status reads it as what it is (not a page: tripped page-lost) and
    // changes nothing.
    assert_status_page_lost(&e.page, "short");
    assert_eq!(file_len(&e.page), 8);
    // A stop lands: the file becomes a whole page, tripped page-lost.
    naoctl_ok(&e.page, &["stop"]);
    assert_eq!(file_len(&e.page), deathswitch::LEN as u64);
    assert_eq!(status_json(&e.page)["reason"], "page-lost");
}

#[test]
fn a_zeroed_page_reads_tripped_page_lost_and_stop_makes_it_whole() {
    let e = env();
    naoctl(&e.page, &["rearm", "--yes"]);
    std::fs::write(&e.page, [0u8; deathswitch::LEN]).unwrap();
    assert_status_page_lost(&e.page, "no-magic");
    assert_eq!(std::fs::read(&e.page).unwrap(), [0u8; deathswitch::LEN]);
    naoctl_ok(&e.page, &["stop"]);
    let v = status_json(&e.page);
    assert_eq!(v["reason"], "page-lost");
    assert_eq!(v["integrity"], "intact");
}

#[test]
fn rearm_without_a_terminal_and_without_yes_refuses() {
    let e = env();
    naoctl(&e.page, &["stop"]);
    let out = naoctl(&e.page, &["rearm"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let t = text(&out);
    assert!(t.contains("refusing") && t.contains("--yes"), "{t}");
    assert_eq!(status_json(&e.page)["reason"], "boot");
}

#[test]
fn stop_keeps_the_first_reason() {
    let e = env();
    naoctl(&e.page, &["rearm", "--yes"]);
    Page::open(&e.page).unwrap().trip(Reason::Udp);
    let t = naoctl_ok(&e.page, &["stop"]);
    assert!(t.contains("already tripped (reason udp)"), "{t}");
    assert_eq!(status_json(&e.page)["reason"], "udp");
}

#[test]
fn status_json_has_every_field_of_the_spec() {
    let e = env();
    let page = Page::open(&e.page).unwrap();
    page.rearm();
    page.register(31337);
    page.write_heartbeat(41, deathswitch::monotonic_ns(), false);
    page.trip(Reason::ChestButton);
    page.beat(&Beat {
        cycle: 42,
        t_ns: page.now_ns(),
        all_off: true,
        motion: Motion::LimpTripped,
        safety_flags: (deathswitch::flags::SafetyFlags::CONTROLLER_LOST
            | deathswitch::flags::SafetyFlags::UDP_PORT_NOT_OWNED)
            .bits(),
    });
    page.set_guard(777, true);
    let v = status_json(&e.page);
    assert_eq!(v["state"], "tripped");
    assert_eq!(v["reason"], "chest-button");
    let since = v["since"].as_u64().unwrap();
    let unix_now = deathswitch::unix_ns() / 1_000_000_000;
    assert!(
        since <= unix_now && since + 60 > unix_now,
        "{since} vs {unix_now}"
    );
    assert_eq!(v["driver_pid"], 31337);
    assert_eq!(v["cycle"], 42);
    assert!(v["heartbeat_age_ms"].is_u64());
    assert_eq!(v["all_off_confirmed_cycle"], 42);
    assert_eq!(v["guard"]["holding_board"], true);
    assert_eq!(v["guard"]["pid"], 777);
    assert_eq!(
        v["safety_flags"],
        serde_json::json!(["controller-lost", "udp-port-not-owned"])
    );
}

#[test]
fn status_json_of_a_fresh_page_has_nulls_for_the_heartbeat() {
    let e = env();
    drop(Page::open(&e.page).unwrap());
    let v = status_json(&e.page);
    for k in [
        "driver_pid",
        "cycle",
        "heartbeat_age_ms",
        "all_off_confirmed_cycle",
    ] {
        assert_eq!(v[k], Value::Null, "{k}");
    }
    assert_eq!(v["guard"]["holding_board"], false);
    assert!(v["since"].is_u64());
}

#[test]
fn status_human_shows_state_reason_heartbeat_driver_and_guard() {
    let e = env();
    let page = Page::open(&e.page).unwrap();
    page.register(555);
    page.write_heartbeat(9, deathswitch::monotonic_ns(), true);
    // The guard is this test process: alive.
    let me = std::process::id();
    page.set_guard(me, true);
    let t = naoctl_ok(&e.page, &["status"]);
    let guard = format!("guard: pid {me}, holds the chest board");
    for want in [
        "TRIPPED (boot)",
        "since ",
        "heartbeat: cycle 9",
        "ms ago",
        "driver pid: 555",
        &guard,
    ] {
        assert!(t.contains(want), "{want:?} missing in:\n{t}");
    }
}

#[test]
fn a_missing_directory_error_names_the_path_and_the_tmpfiles_entry() {
    let e = env();
    let bad = e.page.join("sub").join("deathswitch");
    let out = naoctl(&bad, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    assert!(
        t.contains(&bad.display().to_string()) && t.contains("tmpfiles.d"),
        "{t}"
    );
}

#[test]
fn another_layout_version_error_names_the_path_and_the_fix() {
    let e = env();
    let mut bytes = [0u8; deathswitch::LEN];
    bytes[..8].copy_from_slice(&deathswitch::MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
    bytes[deathswitch::LEN - 8..].copy_from_slice(&deathswitch::MAGIC.to_le_bytes());
    std::fs::write(&e.page, bytes).unwrap();
    let out = naoctl(&e.page, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    assert!(
        t.contains("version 9") && t.contains(&e.page.display().to_string()),
        "{t}"
    );
}

#[test]
fn the_page_option_overrides_the_environment() {
    let e = env();
    let other = e.page.with_file_name("other");
    let out = Command::new(NAOCTL)
        .args(["--page", other.to_str().unwrap(), "stop"])
        .env("NAO_RS_DEATHSWITCH", &e.page)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(other.exists());
    assert!(!e.page.exists());
}

/// Runs `naoctl rearm` on a pseudo-terminal (util-linux `script`) with
/// `answer` typed in; `None` when `script` is missing.
fn on_a_terminal(page: &Path, answer: &str) -> Option<(bool, String)> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: `script` (util-linux) is needed to give naoctl a terminal");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("out");
    let mut child = testkit::Proc::from(
        Command::new("script")
            .args(["-qec", &format!("{NAOCTL} rearm"), "/dev/null"])
            .env("NAO_RS_DEATHSWITCH", page)
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // naoctl reads one line from the terminal; written ahead, the pty
        // buffers it until then.
        stdin.write_all(answer.as_bytes()).unwrap();
    }
    // A bound, not a timing assertion: a hung naoctl fails the test.
    let status = child
        .wait_exit(std::time::Duration::from_secs(30))
        .expect("naoctl rearm hung on the terminal");
    Some((status.success(), std::fs::read_to_string(&log).unwrap()))
}

#[test]
fn rearm_on_a_terminal_asks_and_says_to_check_the_robot() {
    let e = env();
    naoctl(&e.page, &["stop"]);
    let Some((ok, t)) = on_a_terminal(&e.page, "n\n") else {
        return;
    };
    assert!(!ok, "{t}");
    assert!(t.contains("Check the robot and its surroundings"), "{t}");
    assert_eq!(status_json(&e.page)["state"], "tripped");
    let Some((ok, t)) = on_a_terminal(&e.page, "y\n") else {
        return;
    };
    assert!(ok, "{t}");
    assert!(t.contains("stays limp"), "{t}");
    assert_eq!(status_json(&e.page)["state"], "armed");
}

/// A process that has exited and been reaped: its pid names nothing (until
/// reused, which the start time catches).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A running runtime's beat of `cycle`, leaving `motion` (`Switch::beat`).
fn beat(page: &Page, cycle: u64, motion: Motion) {
    page.beat(&Beat {
        cycle,
        t_ns: page.now_ns(),
        all_off: motion != Motion::Awake,
        motion,
        safety_flags: 0,
    });
}

#[test]
fn status_shows_a_robot_limp_and_waiting_for_a_wake_to_every_reader() {
    let e = env();
    let page = Page::open(&e.page).unwrap();
    page.rearm();
    // The runtime is this test process (alive), limp until woken.
    page.register(std::process::id());
    beat(&page, 0, Motion::LimpWaitingForWake);
    let v = status_json(&e.page);
    assert_eq!(v["state"], "armed");
    assert_eq!(v["motion"], "limp-waiting-for-wake");
    assert_eq!(v["limp_waiting_for_wake"], true);
    assert_eq!(v["driver_alive"], true);
    assert_eq!(v["wake_generation"], page.snapshot().trip_count);
    let t = text(&naoctl(&e.page, &["status"]));
    assert!(t.contains("motion: limp, waiting for a wake"), "{t}");
    assert!(t.contains("wake generation: 1"), "{t}");
    // Awake; then tripped: no wake generation while tripped.
    beat(&page, 1, Motion::Awake);
    assert_eq!(status_json(&e.page)["limp_waiting_for_wake"], false);
    page.trip(Reason::Naoctl);
    let v = status_json(&e.page);
    assert_eq!(v["wake_generation"], Value::Null);
    // A runtime that is gone says nothing about the joints any more.
    page.register(dead_pid());
    beat(&page, 0, Motion::Awake);
    let v = status_json(&e.page);
    assert_eq!(v["driver_alive"], false);
    assert_eq!(v["motion"], "none");
    assert!(text(&naoctl(&e.page, &["status"])).contains("motion: no runtime runs"));
}

#[test]
fn a_dead_guard_named_in_the_page_is_flagged_by_naoctl_status() {
    let e = env();
    let page = Page::open(&e.page).unwrap();
    page.set_guard(dead_pid(), true);
    let v = status_json(&e.page);
    assert_eq!(v["guard"]["alive"], false);
    let t = text(&naoctl(&e.page, &["status"]));
    assert!(t.contains("is DEAD"), "{t}");
    assert!(t.contains("systemctl restart nao-rs-guard"), "the fix: {t}");
    page.set_guard(std::process::id(), false);
    assert_eq!(status_json(&e.page)["guard"]["alive"], true);
}

/// `naoctl status` shows the chest button mode of the runtime the page
/// names, from its status file next to the page; a status file of another
/// process, or none, reads as unknown.
#[test]
fn status_shows_the_runtimes_chest_button_mode_from_its_status_file() {
    let e = env();
    let page = Page::open(&e.page).unwrap();
    // The runtime is this test process: alive.
    let me = std::process::id();
    page.register(me);
    let status = e.page.with_file_name("status.json");
    let v = status_json(&e.page);
    assert_eq!(v["chest_button"], Value::Null, "no status file yet");
    let t = naoctl_ok(&e.page, &["status"]);
    assert!(t.contains("chest button: unknown (no status file"), "{t}");

    std::fs::write(
        &status,
        format!("{{\"pid\":{me},\"chest_button\":\"hold:1000\"}}\n"),
    )
    .unwrap();
    let v = status_json(&e.page);
    assert_eq!(v["chest_button"], "hold:1000");
    assert_eq!(v["chest_button_hold_ms"], 1000);
    let t = naoctl_ok(&e.page, &["status"]);
    assert!(
        t.contains("chest button: hold:1000: a press held 1000 ms stops the robot; shorter presses reach the program only"),
        "{t}"
    );

    std::fs::write(
        &status,
        format!("{{\"pid\":{me},\"chest_button\":\"trip\"}}\n"),
    )
    .unwrap();
    assert_eq!(status_json(&e.page)["chest_button"], "trip");
    assert_eq!(status_json(&e.page)["chest_button_hold_ms"], Value::Null);
    let t = naoctl_ok(&e.page, &["status"]);
    assert!(
        t.contains("chest button: trip: every press stops the robot"),
        "{t}"
    );

    // Another process's status file (a stale one) is not this runtime's.
    std::fs::write(&status, "{\"pid\":1,\"chest_button\":\"hold:1000\"}\n").unwrap();
    assert_eq!(status_json(&e.page)["chest_button"], Value::Null);
}
