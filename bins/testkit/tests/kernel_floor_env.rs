//! `NAO_RS_TEST_KERNEL_FLOOR=4.4`: every program the kit starts runs
//! under the kernel floor. One test in its own binary: it sets the
//! variable for the whole test process.

use std::process::Command;

use testkit::{ok, output, Proc, KERNEL_FLOOR_ENV};

#[test]
fn with_the_floor_asked_for_every_program_the_kit_starts_runs_under_it() {
    let status = |cmd: &mut Command| {
        let out = ok(
            output(cmd.args(["-c", "grep ^Seccomp: /proc/self/status"])),
            "sh reading its status",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(status(&mut Command::new("sh")).contains("Seccomp:\t0"));
    // The only thread of this test binary that runs now: nothing reads the
    // environment while it changes.
    std::env::set_var(KERNEL_FLOOR_ENV, "4.4");
    assert!(status(&mut Command::new("sh")).contains("Seccomp:\t2"));
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("sh.log");
    let mut p = Proc::spawn_logged(
        "sh",
        Command::new("sh").args(["-c", "grep ^Seccomp: /proc/self/status"]),
        &log,
    );
    assert!(p.wait_exit(std::time::Duration::from_secs(30)).is_some());
    assert!(p.log().contains("Seccomp:\t2"), "{}", p.log());
}
