//! Page integrity: damage done by a second process (`sh -c` with truncate,
//! dd, rm, mv) to the file under a live mapping. Each time the live holder
//! reads tripped `page-lost`, does not crash, and `check` reports what it
//! repaired; the file is whole again.

use std::path::Path;
use std::process::Command;

use super::{registered, tripped, Fixture};
use crate::{Integrity, Page, Reason, LEN};
use testkit::sh_ok;

/// An armed page with a heartbeat, as a running runtime leaves it.
fn armed_page() -> Fixture {
    let f = registered("deathswitch", 4242);
    f.page.write_heartbeat(7, 1_000, false);
    assert!(!tripped(&f.page));
    f
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn assert_whole_and_page_lost(f: &Fixture) {
    assert!(tripped(&f.page));
    assert_eq!(f.page.reason(), Some(Reason::PageLost));
    assert!(f.page.snapshot().magic_ok);
    assert_eq!(file_len(&f.path), LEN as u64);
    assert_eq!(f.page.check(), Integrity::Intact);
    // A second opener (another process would) sees the same tripped page.
    let other = Page::open(&f.path).unwrap();
    assert_eq!(other.reason(), Some(Reason::PageLost));
}

/// Damage the holder reads as tripped page-lost, which `check` repairs.
fn assert_lost_then_repaired(f: &Fixture) {
    assert!(tripped(&f.page));
    assert_eq!(f.page.reason(), Some(Reason::PageLost));
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_whole_and_page_lost(f);
}

#[test]
fn truncation_to_8_bytes_reads_tripped_page_lost_and_is_repaired() {
    let f = armed_page();
    sh_ok("truncate -s 8 \"$1\"", &f.path);
    // The head magic survives in the first 8 bytes; the rest reads zero.
    assert!(tripped(&f.page));
    assert_eq!(f.page.reason(), Some(Reason::PageLost));
    f.page.write_heartbeat(8, 2_000, false); // no crash
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_whole_and_page_lost(&f);
}

#[test]
fn truncation_to_zero_raises_sigbus_which_re_extends_the_file() {
    let f = armed_page();
    let before = crate::sigbus::handled();
    sh_ok("truncate -s 0 \"$1\"", &f.path);
    // The access faults; the handler re-extends the file and the retried
    // access reads zero: no magic, tripped.
    assert!(tripped(&f.page));
    assert!(crate::sigbus::handled() > before);
    assert_eq!(file_len(&f.path), LEN as u64);
    assert_eq!(f.page.reason(), Some(Reason::PageLost));
    f.page.write_heartbeat(8, 2_000, true);
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_whole_and_page_lost(&f);
}

#[test]
fn zeroing_reads_tripped_page_lost_and_is_repaired() {
    let f = armed_page();
    sh_ok(
        "dd if=/dev/zero of=\"$1\" bs=128 count=1 conv=notrunc status=none",
        &f.path,
    );
    assert_lost_then_repaired(&f);
}

#[test]
fn overwriting_with_garbage_reads_tripped_page_lost_and_is_repaired() {
    let f = armed_page();
    sh_ok(
        "printf 'garbage garbage garbage garbage garbage garbage garbage garbage!' | \
         dd of=\"$1\" bs=64 count=2 conv=notrunc status=none",
        &f.path,
    );
    assert_lost_then_repaired(&f);
}

#[test]
fn growing_the_file_keeps_the_page_intact() {
    let f = armed_page();
    sh_ok("truncate -s 4096 \"$1\"", &f.path);
    assert!(!tripped(&f.page));
    assert_eq!(f.page.check(), Integrity::Intact);
}

#[test]
fn deletion_is_detected_and_a_new_page_tripped_page_lost_is_mapped() {
    let f = armed_page();
    let old = Page::open(&f.path).unwrap(); // another holder of the old file
    sh_ok("rm -f \"$1\"", &f.path);
    assert_eq!(f.page.check(), Integrity::Replaced);
    assert_eq!(f.page.all.lock().unwrap().len(), 2, "two files mapped");
    assert_whole_and_page_lost(&f);
    // The old file, still mapped by others, is tripped too.
    assert_eq!(old.reason(), Some(Reason::PageLost));
    assert_eq!(old.check(), Integrity::Replaced);
    f.page.trip(Reason::Naoctl);
    f.page.rearm();
    assert!(!tripped(&old), "both now share the new file");
}

#[test]
fn replacement_by_a_valid_armed_copy_is_detected_and_trips_page_lost() {
    let f = armed_page();
    // The nastiest replacement: a copy of the armed page itself, magic and
    // all, renamed over the path.
    sh_ok("cp \"$1\" \"$1.new\" && mv -f \"$1.new\" \"$1\"", &f.path);
    assert!(!tripped(&f.page), "the old mapping can't see the rename");
    assert_eq!(f.page.check(), Integrity::Replaced);
    assert_whole_and_page_lost(&f);
    // Writes now land in the file at the path.
    f.page.write_heartbeat(9, 3_000, true);
    let other = Page::open(&f.path).unwrap();
    assert_eq!(other.snapshot().last_cycle, Some(9));
}

#[test]
fn replacement_by_garbage_is_detected_and_trips_page_lost() {
    let f = armed_page();
    sh_ok(
        "printf 'xx' > \"$1.new\" && mv -f \"$1.new\" \"$1\"",
        &f.path,
    );
    assert_eq!(f.page.check(), Integrity::Replaced);
    assert_whole_and_page_lost(&f);
}

#[test]
fn every_user_of_a_shared_page_switches_to_the_replacement() {
    let f = armed_page();
    let page = std::sync::Arc::new(f.page);
    let reader = {
        let page = page.clone();
        std::thread::spawn(move || {
            // Read until the switch is visible (a bound, not a timing assert).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < until {
                if page.reason() == Some(Reason::PageLost) {
                    return true;
                }
                std::hint::spin_loop();
            }
            false
        })
    };
    sh_ok("rm -f \"$1\"", &f.path);
    assert_eq!(page.check(), Integrity::Replaced);
    assert!(reader.join().unwrap());
}

#[test]
fn check_reports_intact_for_an_untouched_page() {
    let f = armed_page();
    for _ in 0..3 {
        assert_eq!(f.page.check(), Integrity::Intact);
    }
    assert!(!tripped(&f.page));
    assert_eq!(f.page.snapshot().driver_pid, Some(4242));
}

/// The child half of the chaining test: a SIGBUS on a mapping that isn't a
/// page must still kill the process, as without our handler.
#[test]
fn sigbus_at_other_addresses_goes_to_the_previous_handler() {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os("DEATHSWITCH_SIGBUS_CHILD").is_some() {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: sets this child's core size limit to 0 (no core file).
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        let dir = tempfile::tempdir().unwrap();
        let _page = Page::open(&dir.path().join("deathswitch")).unwrap(); // installs the handler
        let other = dir.path().join("other");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&other)
            .unwrap();
        f.set_len(4096).unwrap();
        let map = memmap2::MmapOptions::new().len(4096).map_raw(&f).unwrap();
        f.set_len(0).unwrap();
        // SAFETY: deliberately reads a truncated mapping to raise SIGBUS.
        let v = unsafe { std::ptr::read_volatile(map.as_ptr()) };
        println!("survived with {v}");
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "page::tests::integrity::sigbus_at_other_addresses_goes_to_the_previous_handler",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DEATHSWITCH_SIGBUS_CHILD", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}
