//! `nao-rs record` against the virtual robot, with a chest button press in
//! the session, writes a recording that `nao-rs replay` passes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testkit::{Proc, Rig};

/// Starts `nao-rs record` of 250 cycles on the rig's board with `extra`
/// arguments, into `session.rec` in the rig's folder.
fn record(rig: &Rig, extra: &[&OsStr]) -> (Proc, PathBuf) {
    let out = rig.dir().join("session.rec");
    let rec = Proc::spawn(
        "nao-rs record",
        rig.command("nao-rs")
            .args(["record", "--link", &rig.link_arg(), "--cycles", "250"])
            .args(extra)
            .arg("--out")
            .arg(&out),
    );
    (rec, out)
}

/// Waits for the recorder to succeed; the recording's text.
fn finished(mut rec: Proc, out: &Path) -> String {
    let status = rec.wait().unwrap();
    assert!(status.success());
    std::fs::read_to_string(out).unwrap()
}

fn assert_replays(rig: &Rig, out: &Path) {
    let replay = testkit::output(rig.command("nao-rs").arg("replay").arg(out));
    assert!(
        replay.status.success(),
        "replay: {}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
}

#[test]
fn recorded_session_with_a_chest_button_press_replays() {
    let rig = Rig::start();
    let (rec, out) = record(&rig, &[OsStr::new("--armed")]);
    std::thread::sleep(Duration::from_millis(1500));
    testkit::ok(rig.sim_ctl(&["button"]), "nao-rs-sim ctl button");
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
    assert_replays(&rig, &out);
}

/// No trip unseen, in a recording: trips re-armed before the next frame
/// (microseconds apart, from this process, the page shared with the
/// recorder) are written as `trip` and `rearm` lines, and the recording
/// replays: the frame after each is all-off in the recording and in replay.
#[test]
fn recorded_trip_and_rearm_between_two_frames_replays() {
    let rig = Rig::start();
    let page_path = rig.page_path();
    let page = deathswitch::Page::open(page_path).unwrap();
    page.rearm();
    let (rec, out) = record(&rig, &[OsStr::new("--page"), page_path.as_os_str()]);
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
    assert_replays(&rig, &out);
}
