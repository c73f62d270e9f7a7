//! Compound faults on the page:
//! damage done by a second process (`sh`, `dd`, `rm`, `ln`) under a live
//! holder that registered its identity. Each time the holder reads tripped
//! `page-lost`, `check` says so, and the identity it registered is on the
//! page again after that check.

use std::sync::atomic::Ordering;

use super::{registered, tripped, Fixture};
use crate::{Damage, Integrity, Page, Reason, Switch, TimeField, LEN, MAGIC};
use testkit::{poke, sh_ok};

const DRIVER: u32 = 4242;
const GUARD: u32 = 77;

/// An armed page with a heartbeat, as a running runtime and guard leave it:
/// one holder registered as the runtime and as the guard (holding).
fn armed_page() -> Fixture {
    let f = armed_page_at("deathswitch");
    f.page.write_heartbeat(7, crate::monotonic_ns(), false);
    assert_eq!(f.page.check(), Integrity::Intact);
    assert!(!tripped(&f.page));
    f
}

/// An armed page at `run/deathswitch` in its folder, without a heartbeat:
/// the same identity as [`armed_page`], one directory deeper.
fn armed_page_in_run() -> Fixture {
    armed_page_at("run/deathswitch")
}

fn armed_page_at(rel: &str) -> Fixture {
    let f = registered(rel, DRIVER);
    f.page.set_guard(GUARD, true);
    f
}

fn assert_identity(page: &Page, what: &str) {
    let s = page.snapshot();
    assert_eq!(s.driver_pid, Some(DRIVER), "{what}: {s:?}");
    assert_eq!(s.guard_pid, Some(GUARD), "{what}: {s:?}");
    assert!(s.guard_holding, "{what}: {s:?}");
}

fn assert_lost_then_intact(f: &Fixture, got: Integrity, want: Integrity, what: &str) {
    assert_eq!(got, want, "{what}: {:?}", f.page.damage());
    assert!(tripped(&f.page), "{what}");
    assert_eq!(f.page.reason(), Some(Reason::PageLost), "{what}");
    assert!(f.page.snapshot().magic_ok, "{what}");
    assert_identity(&f.page, what);
    assert_eq!(
        f.page.check(),
        Integrity::Intact,
        "{what}: {:?}",
        f.page.damage()
    );
    assert_identity(&f.page, what);
    // Another process's view: the identity is in the file.
    let other = Page::open(&f.path).unwrap();
    assert_eq!(other.snapshot().driver_pid, Some(DRIVER), "{what}");
}

const REPAIRS: [(&str, &str); 6] = [
    ("truncate to 0", "truncate -s 0 \"$1\""),
    ("truncate to 8", "truncate -s 8 \"$1\""),
    ("truncate to 64", "truncate -s 64 \"$1\""),
    (
        "zero",
        "dd if=/dev/zero of=\"$1\" bs=128 count=1 conv=notrunc status=none",
    ),
    (
        "garbage",
        "printf 'garbage garbage garbage garbage garbage garbage garbage garbage!' | \
         dd of=\"$1\" bs=64 count=2 conv=notrunc status=none",
    ),
    (
        "garbage keeping both magics and the version",
        "printf 'garbage garbage garbage garbage garbage garbage garbage garbage!' | \
         dd of=\"$1\" bs=1 seek=16 count=64 conv=notrunc status=none",
    ),
];

/// Each damage script on an armed page: the next check says `want`, the
/// page reads tripped page-lost and the identity is there again.
fn assert_identity_survives(cases: &[(&str, &str)], want: Integrity) {
    for (what, script) in cases {
        let f = armed_page();
        sh_ok(script, &f.path);
        let got = f.page.check();
        assert_lost_then_intact(&f, got, want, what);
    }
}

#[test]
fn identity_survives_repair_of_each_kind() {
    assert_identity_survives(&REPAIRS, Integrity::Repaired);
}

const REPLACEMENTS: [(&str, &str); 4] = [
    ("delete", "rm -f \"$1\""),
    (
        "replace by an armed copy",
        "cp \"$1\" \"$1.new\" && mv -f \"$1.new\" \"$1\"",
    ),
    (
        "replace by garbage",
        "printf 'xx' > \"$1.new\" && mv -f \"$1.new\" \"$1\"",
    ),
    (
        "symlink to a copy",
        "cp \"$1\" \"$1.copy\" && ln -sf \"$1.copy\" \"$1.new\" && mv -f \"$1.new\" \"$1\"",
    ),
];

#[test]
fn identity_survives_replacement_of_each_kind() {
    assert_identity_survives(&REPLACEMENTS, Integrity::Replaced);
}

#[test]
fn identity_zeroed_by_another_holders_repair_is_stored_again_within_one_check() {
    // Two processes' views: the runtime's page and the guard's page.
    let (_dir, path) = testkit::page_path();
    let runtime = Page::open(&path).unwrap();
    let guard = Page::open(&path).unwrap();
    runtime.rearm();
    runtime.register(DRIVER);
    guard.set_guard(GUARD, false);
    sh_ok("truncate -s 64 \"$1\"", &path);
    // The runtime repairs first: the guard's registration is zeroed.
    assert_eq!(runtime.check(), Integrity::Repaired);
    assert_eq!(runtime.snapshot().guard_pid, None);
    // The guard's next poll stores it again (not damage: no second trip).
    let count = runtime.snapshot().trip_count;
    assert_eq!(guard.check(), Integrity::Intact);
    let s = guard.snapshot();
    assert_eq!((s.driver_pid, s.guard_pid), (Some(DRIVER), Some(GUARD)));
    assert_eq!(s.trip_count, count);
    // And neither undoes the other: both stay intact.
    for _ in 0..3 {
        assert_eq!(runtime.check(), Integrity::Intact);
        assert_eq!(guard.check(), Integrity::Intact);
    }
}

#[test]
fn a_holder_that_cleared_its_registration_is_not_re_registered() {
    let f = armed_page();
    f.page.register(0);
    f.page.set_guard(0, false);
    assert_eq!(
        f.page.driver.load(Ordering::Acquire),
        0,
        "nothing registered"
    );
    sh_ok("truncate -s 8 \"$1\"", &f.path);
    assert_eq!(f.page.check(), Integrity::Repaired);
    let s = f.page.snapshot();
    assert_eq!((s.driver_pid, s.guard_pid), (None, None), "{s:?}");
    // clear_driver_if of its own pid forgets the registration too.
    f.page.register(DRIVER);
    assert!(f.page.clear_driver_if(DRIVER));
    sh_ok("rm -f \"$1\"", &f.path);
    assert_eq!(f.page.check(), Integrity::Replaced);
    assert_eq!(f.page.snapshot().driver_pid, None);
}

/// `check` after `poke`: tripped page-lost with `want`, then whole.
fn assert_impossible(offset: usize, bytes: &[u8], want: Damage) {
    let f = armed_page();
    poke(&f.path, offset, bytes);
    let got = f.page.check();
    assert_eq!(f.page.damage(), Some(want));
    assert_lost_then_intact(&f, got, Integrity::Repaired, &format!("{want:?}"));
}

#[test]
fn impossible_unknown_reason_code_counts_as_page_lost() {
    assert_impossible(
        12,
        &999u32.to_le_bytes(),
        Damage::UnknownReason { code: 999 },
    );
    assert_impossible(12, &20u32.to_le_bytes(), Damage::UnknownReason { code: 20 });
}

#[test]
fn impossible_reason_while_armed_counts_as_page_lost() {
    // Armed (reason 0) with a trip's time: no sequence of whole operations
    // leaves this.
    assert_impossible(16, &1_000u64.to_le_bytes(), Damage::TripTimeWhileArmed);
    assert_impossible(24, &1_000u64.to_le_bytes(), Damage::TripTimeWhileArmed);
}

#[test]
fn impossible_times_in_the_future_count_as_page_lost() {
    let hour = 3_600_000_000_000u64;
    let future = crate::monotonic_ns() + hour;
    // A tripped page whose trip time lies an hour ahead.
    let f = armed_page();
    f.page.trip(Reason::Udp);
    poke(&f.path, 16, &future.to_le_bytes());
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_eq!(
        f.page.damage(),
        Some(Damage::FutureTime {
            field: TimeField::TrippedAt
        })
    );
    assert_identity(&f.page, "tripped_at_ns");
    // A beat an hour ahead would blind the guard for an hour.
    assert_impossible(
        48,
        &future.to_le_bytes(),
        Damage::FutureTime {
            field: TimeField::Beat,
        },
    );
    // Within the tolerance is fine: a beat stamped now.
    let f = armed_page();
    f.page.write_heartbeat(8, crate::monotonic_ns(), true);
    assert_eq!(f.page.check(), Integrity::Intact);
}

#[test]
fn wall_clock_times_are_display_only_and_a_clock_step_of_two_hours_is_no_damage() {
    let hour = 3_600_000_000_000u64;
    for t in [crate::unix_ns() + 2 * hour, crate::unix_ns() - 2 * hour] {
        let f = armed_page();
        poke(&f.path, 80, &t.to_le_bytes());
        assert_eq!(f.page.check(), Integrity::Intact, "armed_at_unix_ns {t}");
        f.page.trip(Reason::Udp);
        poke(&f.path, 24, &t.to_le_bytes());
        assert_eq!(f.page.check(), Integrity::Intact, "tripped_at_unix_ns {t}");
    }
}

#[test]
fn impossible_driver_pid_that_is_not_the_registered_runtime_counts_as_page_lost() {
    assert_impossible(
        32,
        &31337u32.to_le_bytes(),
        Damage::ForeignDriver { pid: 31337 },
    );
    assert_impossible(
        64,
        &31337u32.to_le_bytes(),
        Damage::ForeignGuard { pid: 31337 },
    );
    // A holder that registered nothing (naoctl) has no opinion on the pid.
    let f = armed_page();
    let other = Page::open(&f.path).unwrap();
    poke(&f.path, 32, &31337u32.to_le_bytes());
    assert_eq!(other.check(), Integrity::Intact);
    assert_eq!(f.page.check(), Integrity::Repaired);
}

#[test]
fn impossible_garbage_in_reserved_words_counts_as_page_lost() {
    assert_impossible(108, &[0x5a; 4], Damage::Garbage);
    assert_impossible(68, &7u32.to_le_bytes(), Damage::Garbage);
    assert_impossible(104, &9u32.to_le_bytes(), Damage::Garbage);
    assert_impossible(112, &0u64.to_le_bytes(), Damage::Garbage);
}

#[test]
fn a_registered_identity_with_another_start_time_counts_as_page_lost() {
    // The pid is this holder's, the start time another process's: a
    // reused pid, or damage.
    assert_impossible(
        88,
        &1u64.to_le_bytes(),
        Damage::ForeignDriver { pid: DRIVER },
    );
    assert_impossible(96, &1u64.to_le_bytes(), Damage::ForeignGuard { pid: GUARD });
}

#[test]
fn a_trip_count_that_went_back_counts_as_page_lost_and_a_repair_changes_it() {
    let f = armed_page();
    f.page.trip(Reason::Udp);
    f.page.rearm();
    assert_eq!(f.page.check(), Integrity::Intact);
    let before = f.page.snapshot().trip_count;
    assert_eq!(before, 2);
    poke(&f.path, 72, &1u64.to_le_bytes());
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_eq!(f.page.damage(), Some(Damage::TripCountWentBack));
    // Zeroing then repairing gives a count none of the holders read before.
    let f = armed_page();
    let count = f.page.snapshot().trip_count;
    sh_ok(
        "dd if=/dev/zero of=\"$1\" bs=128 count=1 conv=notrunc status=none",
        &f.path,
    );
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert!(
        f.page.snapshot().trip_count > count,
        "{} vs {count}",
        f.page.snapshot().trip_count
    );
}

/// A path that cannot be examined: tripped page-lost, the errno named, the
/// check retried each time without crashing; once fixed, a new page.
fn assert_path_damage(f: &Fixture, errno: i32, fix: &str, after_fix: Integrity) {
    for _ in 0..5 {
        assert_eq!(f.page.check(), Integrity::Replaced);
        assert!(tripped(&f.page));
        assert_eq!(f.page.reason(), Some(Reason::PageLost));
        assert_eq!(f.page.damage(), Some(Damage::Path { errno }));
        f.page.write_heartbeat(9, crate::monotonic_ns(), true); // no crash
    }
    // A re-arm of the old page (say through another path) is undone by
    // the next check: the path still does not name it.
    f.page.rearm();
    assert_eq!(f.page.check(), Integrity::Replaced);
    assert!(tripped(&f.page));
    sh_ok(fix, f.dir.path());
    assert_eq!(f.page.check(), after_fix, "{:?}", f.page.damage());
    assert_eq!(f.page.reason(), Some(Reason::PageLost));
    assert_identity(&f.page, "after the fix");
    assert_eq!(f.page.check(), Integrity::Intact);
}

#[test]
fn path_damage_page_path_replaced_by_a_symlink_loop_trips_page_lost() {
    let f = armed_page();
    sh_ok("rm -f \"$1\" && ln -s \"$1\" \"$1\"", &f.path);
    assert_path_damage(
        &f,
        libc::ELOOP,
        "rm -f \"$1/deathswitch\"",
        Integrity::Replaced,
    );
}

#[test]
fn path_damage_page_directory_replaced_by_a_file_trips_page_lost() {
    let f = armed_page_in_run();
    sh_ok("rm -rf \"$1/run\" && echo file > \"$1/run\"", f.dir.path());
    assert_path_damage(
        &f,
        libc::ENOTDIR,
        "rm -f \"$1/run\" && mkdir \"$1/run\"",
        Integrity::Replaced,
    );
}

#[test]
fn path_damage_any_stat_error_trips_page_lost() {
    // A directory on the way replaced by a symlink loop: ELOOP from a
    // component, not from the page itself.
    let f = armed_page_in_run();
    sh_ok(
        "mv \"$1/run\" \"$1/old\" && ln -s \"$1/run\" \"$1/run\"",
        f.dir.path(),
    );
    assert_path_damage(
        &f,
        libc::ELOOP,
        "rm -f \"$1/run\" && mv \"$1/old\" \"$1/run\"",
        // The very file the page maps is back at the path: intact (and
        // still tripped page-lost).
        Integrity::Intact,
    );
}

#[test]
fn a_page_made_by_another_version_in_place_counts_as_page_lost() {
    let f = armed_page();
    poke(&f.path, 8, &1u32.to_le_bytes());
    assert_eq!(f.page.check(), Integrity::Repaired);
    assert_eq!(f.page.damage(), Some(Damage::OtherVersion { found: 1 }));
    assert_identity(&f.page, "version");
    let head = std::fs::read(&f.path).unwrap();
    assert_eq!(u64::from_le_bytes(head[..8].try_into().unwrap()), MAGIC);
    assert_eq!(head.len(), LEN);
}

#[test]
fn a_page_zeroed_then_made_whole_and_re_armed_by_another_process_has_a_count_no_holder_read() {
    // The runtime read the armed page at its count; before its next check
    // the file is zeroed, and naoctl (a holder that read nothing) makes it
    // whole and re-arms it. The count must differ from what the runtime
    // read, or the runtime sees an armed page that never changed.
    for damage in [
        "truncate -s 0 \"$1\"",
        "dd if=/dev/zero of=\"$1\" bs=128 count=1 conv=notrunc status=none",
    ] {
        let f = armed_page();
        let read = f.page.snapshot().trip_count;
        sh_ok(damage, &f.path);
        let other = Page::open_to_trip(&f.path).unwrap();
        other.rearm();
        let s = other.snapshot();
        assert!(s.armed, "{damage}");
        assert_ne!(s.trip_count, read, "{damage}: the runtime's count again");
        assert!(s.trip_count > read, "{damage}: counts only grow");
    }
}
