//! The guard checks the page every poll and logs what `Page::check` did:
//! PageRepaired (truncated, magic gone) and PageReplaced (deleted).

mod common;

use std::process::Command;
use std::time::Duration;

use common::wait_for;
use deathswitch::{Page, Reason};
use testkit::Proc;

const GUARD: &str = env!("CARGO_BIN_EXE_nao-rs-guard");

#[test]
fn guard_logs_page_repaired_and_page_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let page_path = dir.path().join("deathswitch");
    let log_path = dir.path().join("guard.log");
    let page = Page::open(&page_path).unwrap();
    page.rearm();
    let guard = Proc::spawn(
        "nao-rs-guard",
        Command::new(GUARD)
            .arg("--page")
            .arg(&page_path)
            .args([
                "--link",
                &format!("sim:{}", dir.path().join("none.sock").display()),
                "--udp-port",
                "0",
            ])
            .stderr(std::fs::File::create(&log_path).unwrap()),
    );
    wait_for("the guard", Duration::from_secs(10), || {
        (page.snapshot().guard_pid == Some(guard.pid())).then_some(())
    });
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Truncated to 8 bytes by another process.
    let st = Command::new("truncate")
        .args(["-s", "8"])
        .arg(&page_path)
        .status()
        .unwrap();
    assert!(st.success());
    wait_for("PageRepaired", Duration::from_secs(3), || {
        log().contains("PageRepaired").then_some(())
    });
    assert_eq!(
        std::fs::metadata(&page_path).unwrap().len(),
        deathswitch::LEN as u64,
        "made whole"
    );

    // Deleted: the guard maps a new page at the path, tripped page-lost.
    std::fs::remove_file(&page_path).unwrap();
    wait_for("PageReplaced", Duration::from_secs(3), || {
        log().contains("PageReplaced").then_some(())
    });
    let fresh = Page::open(&page_path).unwrap();
    assert_eq!(fresh.snapshot().reason, Some(Reason::PageLost));
}
