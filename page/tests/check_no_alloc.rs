//! `Page::check` allocates nothing on any path, including while a replaced
//! page cannot be recreated (it once allocated on every retry). A counting global allocator counts this thread's allocations
//! over 1,000 checks of each broken path.

use deathswitch::{Integrity, Page, Reason};
use testkit::{allocations, sh_ok};

#[global_allocator]
static GLOBAL: testkit::CountingAlloc = testkit::CountingAlloc;

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
        page.register_driver(4242);
        sh_ok(script, dir.path());
        let mut results = [0usize; 3];
        let n = allocations(|| {
            for _ in 0..1000 {
                match page.check() {
                    Integrity::Intact => results[0] += 1,
                    Integrity::Repaired => results[1] += 1,
                    Integrity::Replaced => results[2] += 1,
                }
                let _ = page.is_tripped();
                page.write_heartbeat(1, deathswitch::now_ns(), true);
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
    page.register_driver(4242);
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
