//! `Page::check` allocates nothing on any path, including while a replaced
//! page cannot be recreated. A counting global allocator counts this
//! thread's allocations over 1,000 checks of each broken path, and over the
//! cycle's switch calls (`Switch::read`, `trip`, `beat`) on the page and on
//! the in-memory switch, intact and damaged.

use deathswitch::{Beat, Integrity, MemorySwitch, Motion, Page, Reason, Switch};
use nao_kit::alloc::allocations;
use testkit::sh_ok;

#[global_allocator]
static GLOBAL: nao_kit::alloc::CountingAlloc = nao_kit::alloc::CountingAlloc;

#[test]
fn check_allocates_nothing_while_a_replaced_page_cannot_be_recreated() {
    let cases = [
        ("directory deleted", "rm -rf \"$1/run\""),
        (
            "page path a symlink loop",
            "rm \"$1/run/deathswitch\" && ln -s deathswitch \"$1/run/deathswitch\"",
        ),
        (
            "page directory replaced by a file",
            "rm -rf \"$1/run\" && echo x > \"$1/run\"",
        ),
        (
            "page path replaced by a directory",
            "rm \"$1/run/deathswitch\" && mkdir \"$1/run/deathswitch\"",
        ),
        (
            "page path replaced by a fifo",
            "rm \"$1/run/deathswitch\" && mkfifo \"$1/run/deathswitch\"",
        ),
    ];
    for (what, script) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        let page = Page::open(&dir.path().join("run").join("deathswitch")).unwrap();
        page.rearm();
        page.register(4242);
        sh_ok(script, dir.path());
        let mut results = [0usize; 3];
        let n = allocations(|| {
            for _ in 0..1000 {
                match page.check() {
                    Integrity::Intact => results[0] += 1,
                    Integrity::Repaired => results[1] += 1,
                    Integrity::Replaced => results[2] += 1,
                }
                let _ = page.snapshot();
                page.write_heartbeat(1, deathswitch::monotonic_ns(), true);
            }
        });
        assert_eq!(n, 0, "{what}: allocations in 1,000 checks");
        assert_eq!(
            results,
            [0, 0, 1000],
            "{what}: every check says the page is lost"
        );
        assert_eq!(page.reason(), Some(Reason::PageLost), "{what}");
        assert!(page.damage().is_some(), "{what}");
    }
}

#[test]
fn check_allocates_nothing_on_an_intact_page_and_while_repairing() {
    let (dir, path) = testkit::page_path();
    let page = Page::open(&path).unwrap();
    page.rearm();
    page.register(4242);
    page.set_guard(77, true);
    let n = allocations(|| {
        for _ in 0..1000 {
            assert_eq!(page.check(), Integrity::Intact);
        }
    });
    assert_eq!(n, 0, "intact");
    for script in [
        "truncate -s 0 \"$1/deathswitch\"",
        "truncate -s 8 \"$1/deathswitch\"",
        "dd if=/dev/zero of=\"$1/deathswitch\" bs=128 count=1 conv=notrunc status=none",
    ] {
        sh_ok(script, dir.path());
        let n = allocations(|| assert_eq!(page.check(), Integrity::Repaired));
        assert_eq!(n, 0, "{script}");
        assert_eq!(page.snapshot().driver_pid, Some(4242));
    }
}

/// One cycle's switch calls, `n` times: read, trip, beat.
fn cycles(switch: &dyn Switch, n: u64) {
    for cycle in 0..n {
        let s = switch.read();
        let _ = switch.trip(Reason::Api);
        switch.beat(&Beat {
            cycle,
            t_ns: switch.now_ns(),
            all_off: !s.armed,
            motion: Motion::LimpTripped,
            safety_flags: 0,
        });
    }
}

#[test]
fn switch_read_trip_and_beat_allocate_nothing() {
    let (dir, path) = testkit::page_path();
    let page = Page::open(&path).unwrap();
    page.rearm();
    Switch::register(&page, 4242);
    let n = allocations(|| cycles(&page, 1000));
    assert_eq!(n, 0, "page, intact");
    sh_ok("truncate -s 8 \"$1/deathswitch\"", dir.path());
    let n = allocations(|| {
        let s = page.read();
        assert_eq!(s.reason, Some(Reason::PageLost), "{s:?}");
        cycles(&page, 10);
    });
    assert_eq!(n, 0, "page, repaired");

    let memory = MemorySwitch::armed();
    memory.register(4242);
    let n = allocations(|| {
        cycles(&memory, 1000);
        memory.rearm();
        memory.damage();
        let s = memory.read();
        assert_eq!(s.reason, Some(Reason::PageLost), "{s:?}");
        cycles(&memory, 10);
    });
    assert_eq!(n, 0, "memory switch");
}
