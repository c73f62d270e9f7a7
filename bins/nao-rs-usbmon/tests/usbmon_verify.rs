//! `nao-rs-usbmon verify`: captures of the worked examples
//! (`recordings/`) and of a live session of the runtime with the virtual
//! robot, as HAL would have made them, with no command on USB, replay equal
//! once the commands are read back from the frames; a restart, a failed
//! write, a re-enumeration, a cycle stall, an over-current and a cut capture
//! are reported; a changed byte is named; exit codes 0, 1, 2.

mod usbmon_support;

use std::path::Path;
use std::process::Command;

use nao_rs_usbmon::verify::{verify, Outcome, Report, VerifyOptions};
use nao_wire::recording::{read_file, Item, Recorded};
use testkit::recordings;
use usbmon_support::{Cap, Session};

const CAP: Cap = Cap {
    little: true,
    mmapped: true,
};

/// A recording's items and its accepted setting.
fn load(path: &Path) -> (Vec<Item>, Option<Vec<u8>>) {
    let items: Vec<Item> = read_file(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|l| l.item)
        .collect();
    let accepted = items.iter().find_map(|i| match i {
        Item::Accepted(v) => Some(v.clone()),
        _ => None,
    });
    (items, accepted)
}

fn frames(items: &[Item]) -> usize {
    items
        .iter()
        .filter(|i| matches!(i, Item::Call(Recorded::BulkOut { .. })))
        .count()
}

fn run(bytes: &[u8], accepted: Option<Vec<u8>>) -> Report {
    verify(
        bytes,
        Path::new("test.pcap"),
        &VerifyOptions {
            device: None,
            accepted,
        },
    )
    .expect("the capture imports")
}

#[test]
fn usbmon_verify_of_each_recordings_capture_is_equal_byte_for_byte() {
    for path in recordings() {
        let (items, accepted) = load(&path);
        let mut s = Session::new();
        s.calls_of(&items, 1_000_000);
        let report = run(&CAP.pcap(&s.events), accepted);
        let text = report.render("test.pcap");
        assert!(report.passed(), "{}:\n{text}", path.display());
        assert_eq!(report.frames_equal(), frames(&items), "{text}");
        assert!(text.contains("PASS test.pcap"), "{text}");
    }
}

#[test]
fn usbmon_verify_follows_a_restart_and_a_re_enumeration_and_skips_a_session_without_start_up() {
    let path = &recordings()[0];
    let (items, accepted) = load(path);
    // HAL runs before the capture starts: its first session is seen from
    // its 10th cycle on (no start-up).
    let from = items
        .iter()
        .position(|i| matches!(i, Item::Cycle { k: 10, .. }))
        .expect("cycle 10");
    let mut s = Session::new();
    s.calls_of(&items[from..], 1_000_000);
    // HAL restarted: a new start-up on the same device number.
    let t = s.t_us + 2_000_000;
    s.calls_of(&items, t);
    // The board re-enumerates as device 9 (a USB reset); HAL starts again.
    let t = s.t_us + 2_000_000;
    s.t_us = t;
    s.enumerate(9, (0xffff, 0x0006));
    s.calls_of(&items, t + 100_000);
    let report = run(&CAP.pcap(&s.events), accepted);
    let text = report.render("test.pcap");
    if std::env::var_os("SHOW").is_some() {
        println!("{text}");
    }
    assert_eq!(report.devices, vec![(1, 5), (1, 9)], "{text}");
    assert_eq!(report.sessions.len(), 3, "{text}");
    assert!(
        matches!(report.sessions[0].outcome, Outcome::NotCompared(_)),
        "{text}"
    );
    for s in &report.sessions[1..] {
        assert!(matches!(s.outcome, Outcome::Equal { .. }), "{text}");
    }
    assert_eq!(report.frames_equal(), 2 * frames(&items), "{text}");
    assert!(report.passed(), "{text}");
}

#[test]
fn usbmon_verify_compares_up_to_a_failed_write_and_says_what_it_left_out() {
    let path = &recordings()[0];
    let (items, accepted) = load(path);
    let at = items
        .iter()
        .position(|i| matches!(i, Item::Cycle { k: 100, .. }))
        .expect("cycle 100");
    let mut s = Session::new();
    s.calls_of(&items[..at], 1_000_000);
    let failed_frame = items[at..]
        .iter()
        .find_map(|i| match i {
            Item::Call(Recorded::BulkOut { data, .. }) => Some(data.clone()),
            _ => None,
        })
        .expect("a frame after cycle 100");
    // The write of cycle 100 times out; HAL is then stopped.
    s.bulk_out_status(&failed_frame, -110);
    let report = run(&CAP.pcap(&s.events), accepted);
    let text = report.render("test.pcap");
    assert!(report.passed(), "{text}");
    assert_eq!(report.frames_equal(), frames(&items[..at]), "{text}");
    assert!(
        text.contains("failed with status -110 (ETIMEDOUT)") && text.contains("not compared"),
        "{text}"
    );
}

/// The capture of `recordings()[0]` with one byte of one frame changed,
/// and the byte's offset in the frame and its new value.
fn changed_capture(dir: &Path) -> (std::path::PathBuf, usize, u8, u8) {
    let (mut items, _) = load(&recordings()[0]);
    let at = items
        .iter()
        .position(|i| matches!(i, Item::Cycle { k: 70, .. }))
        .expect("cycle 70");
    let (offset, was, now) = items[at..]
        .iter_mut()
        .find_map(|i| match i {
            Item::Call(Recorded::BulkOut { data, .. }) => {
                // A byte of the READ messages (not read back as a command).
                let offset = 6;
                let was = data[offset];
                data[offset] ^= 0x40;
                Some((offset, was, data[offset]))
            }
            _ => None,
        })
        .expect("a frame");
    let mut s = Session::new();
    s.calls_of(&items, 1_000_000);
    let path = dir.join("changed.pcap");
    std::fs::write(&path, CAP.pcap(&s.events)).expect("write");
    let _ = now;
    (path, offset, was, now)
}

fn verify_cli(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(testkit::bin("nao-rs-usbmon"))
        .arg("verify")
        .args(args)
        .output()
        .expect("run nao-rs-usbmon verify")
}

#[test]
fn usbmon_verify_cli_exits_0_on_equal_1_naming_the_byte_2_on_unreadable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (items, _) = load(&recordings()[0]);
    let mut s = Session::new();
    s.calls_of(&items, 1_000_000);
    let good = dir.path().join("good.pcap");
    std::fs::write(&good, CAP.pcap(&s.events)).expect("write");
    let out = verify_cli(&[good.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");

    let (changed, offset, was, now) = changed_capture(dir.path());
    let out = verify_cli(&[changed.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("DIFFERS in cycle 70"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "first differing byte: offset {offset}: expected {now:02x}, got {was:02x}"
        )),
        "{stdout}"
    );

    // Not a capture: exit 2, naming the file and the byte offset.
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"not a capture at all").expect("write");
    let out = verify_cli(&[junk.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&*junk.display().to_string()) && stderr.contains("byte offset 0"),
        "{stderr}"
    );
    let missing = dir.path().join("missing.pcap");
    assert_eq!(verify_cli(&[missing.as_os_str()]).status.code(), Some(2));

    // A capture cut inside a packet (the capture killed): the whole packets
    // are verified.
    let bytes = std::fs::read(&good).expect("read");
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).expect("write");
    let out = verify_cli(&[cut.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("ends inside packet"), "{stdout}");
}

/// The items with cycles from `k` on `ms` later (a cycle stall before `k`).
fn stalled(mut items: Vec<Item>, k: u64, ms: u64) -> Vec<Item> {
    for i in &mut items {
        if let Item::Cycle { k: kk, t_ms } = i {
            if *kk >= k {
                *t_ms += ms;
            }
        }
    }
    items
}

/// The answer with the battery's current (bytes 2..4 of its READ answer)
/// set to `ma`, its CRC made good again.
fn with_battery_current(answer: &[u8], ma: i16) -> Option<Vec<u8>> {
    use nao_wire::protocol::frame::{Frame, FrameWriter};
    let a = Frame::parse(answer, 0x5a).ok()?;
    let mut buf = [0u8; 512];
    let mut w = FrameWriter::answer(&mut buf, a.seq).ok()?;
    let mut changed = false;
    for m in a.messages() {
        let mut p = m.payload.to_vec();
        if (m.address, m.command) == (0x02, 0x81) && p.len() >= 4 {
            p[2..4].copy_from_slice(&ma.to_le_bytes());
            changed = true;
        }
        w.push(m.address, m.command, &p).ok()?;
    }
    let n = w.finish();
    changed.then(|| buf[..n].to_vec())
}

#[test]
fn usbmon_verify_stops_comparing_where_hals_safety_levels_are_in_its_frames() {
    let (items, accepted) = load(&recordings()[0]);
    let at = |k: u64| {
        items
            .iter()
            .position(|i| matches!(i, Item::Cycle { k: kk, .. } if *kk == k))
            .expect("the cycle")
    };
    // A cycle stall of 200 ms before cycle 100 (the frames are those of no
    // stall: what matters is that nao-rs's stall level is not applied on top
    // of a stiffness read back).
    let mut s = Session::new();
    s.calls_of(&stalled(items.clone(), 100, 200), 1_000_000);
    let report = run(&CAP.pcap(&s.events), accepted.clone());
    let text = report.render("test.pcap");
    assert!(report.passed(), "{text}");
    assert_eq!(report.frames_equal(), frames(&items[..at(100)]), "{text}");
    assert!(
        text.contains("cycle 100: nao-rs's stall level is 0 (after a cycle stall"),
        "{text}"
    );

    // The battery reports 5000 mA in the answer read in cycle 150: nao-rs's
    // level falls in cycle 151 (the answer is handed over after the write).
    let mut high = items.clone();
    let answer = high[at(150)..]
        .iter_mut()
        .find_map(|i| match i {
            Item::Call(Recorded::BulkIn { answer: Ok(a), .. }) => Some(a),
            _ => None,
        })
        .expect("an answer in cycle 150");
    *answer = with_battery_current(answer, 5000).expect("a battery answer");
    let mut s = Session::new();
    s.calls_of(&high, 1_000_000);
    let report = run(&CAP.pcap(&s.events), accepted);
    let text = report.render("test.pcap");
    assert!(report.passed(), "{text}");
    assert_eq!(report.frames_equal(), frames(&items[..at(151)]), "{text}");
    assert!(
        text.contains(
            "cycle 151: nao-rs's over-current level is 990 (the battery reported 5000 mA"
        ),
        "{text}"
    );
}

/// A live session: `nao-rs record` of the runtime with the virtual robot
/// (armed, the chest button pressed part way: a trip from an answer),
/// turned into the capture HAL's USB traffic would give, verifies equal.
#[test]
fn usbmon_verify_of_a_live_session_with_the_virtual_robot_is_equal() {
    let rig = testkit::Rig::start();
    let out = rig.dir().join("live.rec");
    let mut rec = testkit::Proc::spawn(
        "nao-rs record",
        rig.command("nao-rs")
            .args([
                "record",
                "--link",
                &rig.link_arg(),
                "--cycles",
                "250",
                "--armed",
            ])
            .arg("--out")
            .arg(&out),
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    testkit::ok(rig.sim_ctl(&["button"]), "nao-rs-sim ctl button");
    assert!(rec.wait().expect("the recorder ends").success());
    let (items, accepted) = load(&out);
    let mut s = Session::new();
    s.calls_of(&items, 1_000_000);
    let report = run(&CAP.pcap(&s.events), accepted);
    let text = report.render("live.pcap");
    eprintln!("{text}");
    assert!(report.passed(), "{text}");
    // Compared at least the start-up and a cycle (a cycle stall on a loaded
    // machine ends the compared part early: the note says so).
    assert!(report.frames_equal() >= 3, "{text}");
    if report.frames_equal() < frames(&items) {
        assert!(text.contains("not compared: cycle"), "{text}");
    }
}
