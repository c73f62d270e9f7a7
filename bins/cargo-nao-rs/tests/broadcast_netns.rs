//! `cargo nao-rs stop --broadcast` on a machine without a default route:
//! inside a network namespace this test makes (a veth pair, 10.77.9.1/24,
//! no default route), a listener on the stop port counts the datagrams
//! that reach it through the subnet broadcast. Nothing leaves the
//! namespace. Needs root, `unshare`, `ip` and `python3` (the listener);
//! elsewhere it skips with the reason printed.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cargo-nao-rs");

fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root (network namespaces need root)".into());
    }
    for tool in ["unshare", "ip", "python3"] {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

#[test]
fn broadcast_stop_reaches_the_subnet_without_a_default_route() {
    if let Some(why) = missing() {
        println!("SKIPPED broadcast_stop_reaches_the_subnet_without_a_default_route: {why}");
        return;
    }
    let script = format!(
        r#"set -e
ip link set lo up
ip link add nrs0 type veth peer name nrs1
ip link set nrs1 up
ip addr add 10.77.9.1/24 brd + dev nrs0
ip link set nrs0 up
if ip route | grep -q '^default'; then echo "a default route exists"; exit 3; fi
python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7799))
open("/dev/shm/nrs-bcast-ready-" + str(__import__("os").getppid()), "w").close()
s.settimeout(3)
n = 0
try:
    while True:
        d, _ = s.recvfrom(100)
        n += d == b"NAO-RS STOP"
except socket.timeout:
    pass
print("received", n)
' &
# The listener is bound when it says so (no fixed head start: python can
# take seconds to start on a loaded machine).
ready=/dev/shm/nrs-bcast-ready-$$
for _ in $(seq 1 200); do [ -e "$ready" ] && break; sleep 0.05; done
[ -e "$ready" ] || {{ echo "the listener did not start within 10 s"; exit 4; }}
rm -f "$ready"
"{BIN}" stop --broadcast --port 7799
wait
"#
    );
    let out = Command::new("unshare")
        .args(["--net", "bash", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("every subnet's broadcast address"),
        "{stdout}"
    );
    assert!(stdout.contains("received 10"), "{stdout}\n{stderr}");
}
