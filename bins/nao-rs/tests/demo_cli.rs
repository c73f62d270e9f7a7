//! `nao-rs demo --seconds N` starts the virtual robot and the runtime, shows
//! the status line and the commands to try, and stops everything by itself.

use std::process::Command;

#[test]
fn demo_runs_and_ends_by_itself() {
    let _sim = testkit::bin("nao-rs-sim"); // next to nao-rs, where demo looks
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(testkit::bin("nao-rs"))
        .args(["demo", "--seconds", "2", "--udp-port", &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("NAO_RS_DEATHSWITCH="), "{text}");
    assert!(text.contains("naoctl stop"), "{text}");
    assert!(
        text.contains(&format!("cargo nao-rs stop 127.0.0.1 --port {port}")),
        "{text}"
    );
    assert!(text.contains("cycle"), "a status line: {text}");
    assert!(
        text.contains("woke the robot for you"),
        "the demo says it woke the robot: {text}"
    );
    assert!(text.contains("stopped (switch: shutdown)"), "{text}");
}
