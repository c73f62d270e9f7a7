//! Each robot program logs its start-up facts once (`nao_kit::facts`):
//! the kernel, pidfd present or not, static or dynamic, SCHED_FIFO and
//! locked memory. Under the kernel floor (testkit's seccomp filter, every
//! call newer than Linux 4.4 failing with ENOSYS) the runtime and the
//! beacon say pidfd is absent and run on; the guard, started without it on
//! this kernel, says present.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use testkit::{under_kernel_floor, wait_for, Proc, Rig, Runtime};

/// The start-up facts lines of a log.
fn facts(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("start-up facts"))
        .map(str::to_string)
        .collect()
}

/// Waits (10 s) for the one start-up facts line of `what`'s log; it.
fn the_facts_line(what: &str, log: impl Fn() -> String) -> String {
    wait_for(
        &format!("{what}'s start-up facts"),
        Duration::from_secs(10),
        || (!facts(&log()).is_empty()).then_some(()),
    );
    let lines = facts(&log());
    assert_eq!(
        lines.len(),
        1,
        "{what} logged its facts {} times: {lines:?}",
        lines.len()
    );
    let line = lines[0].clone();
    eprintln!("{what}: {line}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let release = release.trim();
    assert!(
        line.contains(&format!("kernel {release}")),
        "{what}: {line}"
    );
    assert!(
        line.contains("dynamic"),
        "a test build is dynamic: {what}: {line}"
    );
    assert!(line.contains("SCHED_FIFO"), "{what}: {line}");
    assert!(line.contains("memory"), "{what}: {line}");
    line
}

#[test]
fn robot_programs_log_their_start_up_facts_once_and_under_the_4_4_floor_pidfd_is_absent() {
    let rig = Rig::start();
    let _guard = rig.start_guard(0);
    let line = the_facts_line("the guard", || rig.log("guard"));
    assert!(line.contains("pidfd present"), "{line}");

    let rt = Runtime::new("rt").priority(0);
    let mut cmd = rig.runtime_command(&rt);
    let _rt = Proc::spawn_logged("rt", under_kernel_floor(&mut cmd), &rig.log_path("rt"));
    let line = the_facts_line("the runtime under the floor", || rig.log("rt"));
    assert!(line.contains("pidfd absent"), "{line}");
    wait_for("the runtime's status", Duration::from_secs(10), || {
        rig.log("rt").contains("runtime started").then_some(())
    });

    let operator = UdpSocket::bind("127.0.0.1:0").unwrap();
    let log = rig.log_path("beacon");
    let mut cmd = Command::new(testkit::bin("nao-rs-beacon"));
    cmd.arg("--page")
        .arg(rig.page_path())
        .env("NAO_RS_WAKE_SOCKET", rig.wake_socket("rt"))
        .env("NAO_RS_BEACON", "unicast")
        .env(
            "NAO_RS_BEACON_TARGETS",
            operator.local_addr().unwrap().to_string(),
        )
        .env("NAO_RS_TEAM_KEY", rig.dir().join("no.key"));
    let _beacon = Proc::spawn_logged("nao-rs-beacon", under_kernel_floor(&mut cmd), &log);
    let line = the_facts_line("the beacon under the floor", || {
        std::fs::read_to_string(&log).unwrap_or_default()
    });
    assert!(line.contains("pidfd absent"), "{line}");
    // It runs on under the floor: its beacons arrive.
    operator
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 2048];
    assert!(
        operator.recv(&mut buf).is_ok(),
        "no beacon from the beacon under the floor:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
