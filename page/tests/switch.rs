//! The page as a [`Switch`]: one read a cycle (check, then every field),
//! the beat's order, registration and path.

use deathswitch::{Beat, Motion, Page, Reason, Switch};
use testkit::sh_ok;

#[test]
fn page_switch_read_of_a_damaged_page_is_tripped_page_lost_with_the_count_raised() {
    let (dir, path) = testkit::page_path();
    let page = Page::open(&path).unwrap();
    page.rearm();
    let before = page.read();
    assert!(before.armed, "{before:?}");
    for script in [
        "dd if=/dev/zero of=\"$1/deathswitch\" bs=128 count=1 conv=notrunc status=none",
        "rm \"$1/deathswitch\"",
    ] {
        sh_ok(script, dir.path());
        let s = page.read();
        assert!(!s.armed, "{script}: {s:?}");
        assert_eq!(s.reason, Some(Reason::PageLost), "{script}");
        assert!(s.magic_ok, "{script}: made whole");
        assert!(s.trip_count > before.trip_count, "{script}: {s:?}");
        page.rearm();
        assert!(page.read().armed, "{script}: intact again after a re-arm");
    }
}

#[test]
fn page_switch_beat_stores_motion_and_flags_then_the_heartbeat() {
    let (_dir, path) = testkit::page_path();
    let page = Page::open(&path).unwrap();
    page.rearm();
    Switch::register(&page, std::process::id());
    page.beat(&Beat {
        cycle: 7,
        t_ns: page.now_ns(),
        all_off: true,
        motion: Motion::LimpWaitingForWake,
        safety_flags: 0b11,
    });
    let s = page.read();
    assert!(s.armed, "{s:?}");
    assert_eq!(
        (s.last_cycle, s.all_off_confirmed_cycle),
        (Some(7), Some(7))
    );
    assert_eq!(
        (s.motion, s.safety_flags),
        (Motion::LimpWaitingForWake, 0b11)
    );
    assert_eq!(s.driver_pid, Some(std::process::id()));
    assert_eq!(Switch::path(&page), Some(path.as_path()));
    assert!(Switch::trip(&page, Reason::Api));
    assert!(!Switch::trip(&page, Reason::Udp), "the first reason wins");
    assert_eq!(page.read().reason, Some(Reason::Api));
}
