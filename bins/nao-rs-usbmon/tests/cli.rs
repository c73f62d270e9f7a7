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
