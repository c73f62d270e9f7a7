//! The UDP stop owned by the guard: the 11-byte prefix trips `udp`, anything
//! else is ignored, no reply; a port in use is retried every second.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use common::{wait_for, wait_for_opt, Proc};
use deathswitch::{Page, Reason};

const GUARD: &str = env!("CARGO_BIN_EXE_nao-rs-guard");

fn free_port() -> (UdpSocket, u16) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    (s, port)
}

fn guard(dir: &std::path::Path, page: &std::path::Path, port: u16) -> Proc {
    Proc::spawn(
        "nao-rs-guard",
        Command::new(GUARD)
            .arg("--page")
            .arg(page)
            .args([
                "--link",
                &format!("sim:{}", dir.join("no-sim.sock").display()),
                "--udp-port",
                &port.to_string(),
            ])
            .env("NAO_RS_DEATHSWITCH", page)
            .stderr(std::fs::File::create(dir.join("guard.log")).unwrap()),
    )
}

fn send(port: u16, payload: &[u8]) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(payload, ("127.0.0.1", port)).unwrap();
    s
}

#[test]
fn udp_stop_prefix_trips_udp_anything_else_ignored_no_reply() {
    let dir = tempfile::tempdir().unwrap();
    let page_path = dir.path().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    page.rearm();
    let (probe, port) = free_port();
    drop(probe);
    let _g = guard(dir.path(), &page_path, port);
    let log = || std::fs::read_to_string(dir.path().join("guard.log")).unwrap_or_default();
    wait_for(
        "the guard to bind the UDP port",
        Duration::from_secs(5),
        || log().contains("UDP stop listening").then_some(()),
    );

    for other in [
        &b"NAO-RS STO"[..],
        b"nao-rs stop",
        b" NAO-RS STOP",
        b"",
        b"STOP",
    ] {
        send(port, other);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(!page.is_tripped(), "other datagrams are ignored");

    let s = send(port, b"NAO-RS STOP and anything after");
    wait_for("the UDP stop", Duration::from_secs(2), || {
        page.is_tripped().then_some(())
    });
    assert_eq!(page.snapshot().reason, Some(Reason::Udp));
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(s.recv_from(&mut buf).is_err(), "no reply");
}

#[test]
fn udp_port_in_use_is_retried_every_second() {
    let dir = tempfile::tempdir().unwrap();
    let page_path = dir.path().join("deathswitch");
    let page = Page::open(&page_path).unwrap();
    page.rearm();
    // Someone else (the runtime, before it sees the guard) holds the port.
    let holder = UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let _g = guard(dir.path(), &page_path, port);
    let log = || std::fs::read_to_string(dir.path().join("guard.log")).unwrap_or_default();
    wait_for("the bind failure", Duration::from_secs(5), || {
        log().contains("cannot bind").then_some(())
    });
    drop(holder);
    let bound = wait_for_opt(Duration::from_millis(2500), || {
        log().contains("UDP stop listening").then_some(())
    });
    assert!(
        bound.is_some(),
        "bound within one retry after the port came free:\n{}",
        log()
    );
    send(port, b"NAO-RS STOP");
    wait_for("the UDP stop", Duration::from_secs(2), || {
        page.is_tripped().then_some(())
    });
    assert_eq!(page.snapshot().reason, Some(Reason::Udp));
}
