//! `nao-rs record` against the virtual robot, with a chest button press in
//! the session, writes a recording that `nao-rs replay` passes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nao_rs_sim::Spawned;
use testkit::Proc;

fn sim() -> Spawned {
    Spawned::start(testkit::bin("nao-rs-sim"), &["--versions", "10"]).unwrap()
}

/// Starts `nao-rs record` of 250 cycles on `sim` with `extra` arguments,
/// into `session.rec` in the sim's folder.
fn record(sim: &Spawned, extra: &[&OsStr]) -> (Proc, PathBuf) {
    let out = sim.dir().join("session.rec");
    let rec = Command::new(testkit::bin("nao-rs"))
        .args(["record", "--link", &sim.link_arg(), "--cycles", "250"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .spawn()
        .unwrap();
    (Proc::from(rec), out)
}

/// Waits for the recorder to succeed; the recording's text.
fn finished(mut rec: Proc, out: &Path) -> String {
    let status = rec.wait().unwrap();
    assert!(status.success());
    std::fs::read_to_string(out).unwrap()
}

fn assert_replays(out: &Path) {
    let replay = Command::new(testkit::bin("nao-rs"))
        .arg("replay")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "replay: {}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
}

#[test]
fn recorded_session_with_a_chest_button_press_replays() {
    let sim = sim();
    let (rec, out) = record(&sim, &[OsStr::new("--armed")]);
    std::thread::sleep(Duration::from_millis(1500));
    sim.ctl("button").unwrap();
    let text = finished(rec, &out);
    assert!(
        text.contains("\ntrip chest-button\n"),
        "the trip is in the recording"
    );
    assert!(
        text.contains("\ncommand "),
        "the controller's commands are in the recording"
    );
    assert!(
        text.contains("\nwake\n"),
        "the wake of the private session is in the recording"
    );
    assert_replays(&out);
}

/// No trip unseen, in a recording: trips re-armed before the next frame
/// (microseconds apart, from this process, the page shared with the
/// recorder) are written as `trip` and `rearm` lines, and the recording
/// replays: the frame after each is all-off in the recording and in replay.
#[test]
fn recorded_trip_and_rearm_between_two_frames_replays() {
    let sim = sim();
    let page_path = sim.dir().join("deathswitch");
    let page = deathswitch::Page::open(&page_path).unwrap();
    page.rearm();
    let (rec, out) = record(&sim, &[OsStr::new("--page"), page_path.as_os_str()]);
    std::thread::sleep(Duration::from_millis(800));
    for _ in 0..10 {
        page.trip(deathswitch::Reason::Naoctl);
        page.rearm();
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = finished(rec, &out);
    assert!(
        text.contains("\ntrip unknown\nrearm\n"),
        "a trip re-armed between two frames is in the recording"
    );
    assert_replays(&out);
}
