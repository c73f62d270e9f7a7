//! `nao-rs capture` as a process. A real capture needs root, a chest board
//! (`ffff:0006`) on USB and usbmon: the virtual head has all three (the
//! virtual robot over FunctionFS, the stand-in HAL holding it), and there
//! the capture is made and verified byte for byte with
//! `nao-rs-usbmon verify`'s code. Where one is missing the test checks the
//! refusal names it, and prints why the real capture was skipped.

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

fn capture(out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(testkit::bin("nao-rs"))
        .arg("capture")
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run nao-rs capture")
}

fn chest_board_present() -> bool {
    std::fs::read_dir("/sys/bus/usb/devices")
        .map(|d| {
            d.flatten().any(|e| {
                let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
                read("idVendor").trim() == "ffff" && read("idProduct").trim() == "0006"
            })
        })
        .unwrap_or(false)
}

#[test]
fn capture_process_records_hal_restarting_and_verifies_or_says_why_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("hal.pcap");
    if !nix::unistd::geteuid().is_root() {
        let o = capture(&out, &["--seconds", "2"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("needs root"), "{stderr}");
        eprintln!("capture_process: skipped the real capture: not root");
        return;
    }
    if !chest_board_present() {
        let o = capture(&out, &["--seconds", "2", "--no-restart"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("no chest board (ffff:0006)"), "{stderr}");
        assert!(!out.exists(), "nothing is written without a board");
        eprintln!("capture_process: skipped the real capture: no chest board (ffff:0006) on this machine's USB");
        return;
    }
    let o = capture(&out, &["--seconds", "8"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(0) && stderr.contains("usbmon") {
        eprintln!("capture_process: skipped the real capture: usbmon cannot be had here: {stderr}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    let bytes = std::fs::read(&out).expect("the capture");
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        stdout.trim(),
        format!("{} sha256={sha}", out.display()),
        "{stderr}"
    );
    let report = nao_rs_usbmon::verify::verify(
        &bytes,
        &out,
        &nao_rs_usbmon::verify::VerifyOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = report.render(&out.display().to_string());
    eprintln!("{text}");
    assert!(report.passed(), "{text}");
}
