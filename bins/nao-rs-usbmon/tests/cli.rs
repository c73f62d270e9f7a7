//! `nao-rs-usbmon`: writes the recording of a capture, exit 2 on bad
//! arguments, 1 on a capture it cannot read.

use std::process::Command;

use nao_wire::recording::{parse, Item};

mod usbmon_support;

use usbmon_support::{Cap, Session};

fn import_usbmon(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(testkit::bin("nao-rs-usbmon"))
        .args(args)
        .output()
        .expect("run nao-rs-usbmon")
}

#[test]
fn usbmon_import_cli_writes_the_recording() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("hal.pcap");
    let output = dir.path().join("hal.rec");
    std::fs::write(
        &input,
        Cap {
            little: true,
            mmapped: true,
        }
        .pcap(&Session::hal().events),
    )
    .expect("write");
    let out = import_usbmon(&[
        input.as_os_str(),
        output.as_os_str(),
        "--device".as_ref(),
        "1:5".as_ref(),
        "--accepted".as_ref(),
        "10".as_ref(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&output).expect("read");
    let items = parse(&text).expect("a recording");
    assert_eq!(items[0].item, Item::Accepted(vec![10]));
    assert_eq!(
        import_usbmon(&["only-one.pcap".as_ref()]).status.code(),
        Some(2)
    );
    let missing = dir.path().join("nope.pcap");
    assert_eq!(
        import_usbmon(&[missing.as_os_str(), "-".as_ref()])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn usbmon_import_cli_writes_one_recording_per_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("hal.pcap");
    let output = dir.path().join("hal.rec");
    // HAL's session, then HAL restarted: its start-up again (seq from 0).
    let mut s = Session::hal();
    s.t_us += 2_000_000;
    s.control(0x00, 0x09, 1, 0, &[], &[]);
    s.control(0x40, 0x01, 0, 0, &[], &[]);
    s.bulk_out(&[0xa5, 0, 0, 1]);
    s.bulk_in(Ok(&[0x5a, 0, 0, 1]));
    std::fs::write(
        &input,
        Cap {
            little: true,
            mmapped: true,
        }
        .pcap(&s.events),
    )
    .expect("write");
    let out = import_usbmon(&[input.as_os_str(), output.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let first = std::fs::read_to_string(&output).expect("the first session");
    let second = std::fs::read_to_string(dir.path().join("hal.2.rec")).expect("the second");
    assert!(first.contains("bulk_out 02 a5040001"), "{first}");
    assert!(
        second.contains("set_configuration 1") && second.contains("bulk_out 02 a5000001"),
        "{second}"
    );
    assert!(!second.contains("a5040001"), "{second}");
    assert!(stderr.contains("session 2 (from packet"), "{stderr}");
}
