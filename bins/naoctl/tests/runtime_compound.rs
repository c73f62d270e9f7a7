//! Compound faults of the page against a running runtime, from a
//! second process, judged by the virtual robot's trace: path damage and
//! impossible values give all-off `page-lost` from that frame on, the
//! runtime keeps cycling, and naoctl says what is wrong with the path.

mod common;

use common::{assert_all_off_from_that_frame, naoctl_bounded, text, Robot};
use deathswitch::{Page, Reason};
use testkit::{poke, sh};

#[test]
fn runtime_path_damage_symlink_loop_gives_all_off_page_lost_from_that_frame() {
    let r = Robot::start(None);
    // In one step: GNU `ln -sf` makes the link under a temporary name and
    // renames it over the page; with `rm` then `ln` the runtime's next
    // check can recreate the page in between. The fault's time is when the
    // shell returns: the fault has landed by then (spawning the shell can
    // take longer than a period on a loaded machine).
    assert!(sh("ln -sf deathswitch \"$1\"", &r.page_path));
    let t = deathswitch::monotonic_ns();
    let frames = r.frames_from(t, 300);
    assert_all_off_from_that_frame(&frames, t, "symlink loop");
    let (out, took) = naoctl_bounded(&r.page_path, &["status"]);
    println!("naoctl status answered in {} ms", took.as_millis());
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains("Too many levels of symbolic links") && s.contains("rm "),
        "{s}"
    );
    // Fixed: the runtime maps a new page there, tripped page-lost.
    assert!(sh("rm -f \"$1\"", &r.page_path));
    let t0 = std::time::Instant::now();
    loop {
        if let Ok(i) = deathswitch::inspect(&r.page_path) {
            if i.damage.is_none() && i.snapshot.reason == Some(Reason::PageLost) {
                assert!(i.snapshot.driver_pid.is_some(), "the runtime re-registered");
                break;
            }
        }
        assert!(t0.elapsed().as_secs() < 5, "no new page-lost page");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let t = deathswitch::monotonic_ns();
    assert_all_off_from_that_frame(&r.frames_from(t, 200), t, "after the fix");
}

#[test]
fn runtime_path_damage_directory_replaced_by_a_file_gives_all_off_page_lost() {
    let r = Robot::start(None);
    let run = r.page_path.parent().unwrap().to_path_buf();
    assert!(sh("mv \"$1\" \"$1.old\" && echo file > \"$1\"", &run));
    // The fault has landed when the shell returns.
    let t = deathswitch::monotonic_ns();
    assert_all_off_from_that_frame(&r.frames_from(t, 300), t, "directory replaced");
    let (out, _) = naoctl_bounded(&r.page_path, &["stop"]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains("Not a directory") && s.contains("recreate the directory"),
        "{s}"
    );
    // The runtime trips the page it maps (the old directory's file).
    let old = Page::open(&run.with_extension("old").join("deathswitch")).unwrap();
    assert_eq!(old.reason(), Some(Reason::PageLost));
}

#[test]
fn runtime_impossible_values_give_all_off_page_lost() {
    // Armed with a trip time (a reason while armed), and a driver pid that
    // is not the registered runtime: both once stayed stiff.
    for (what, offset, bytes) in [
        (
            "trip time while armed",
            16usize,
            1_000u64.to_le_bytes().to_vec(),
        ),
        ("foreign driver pid", 32, 1u32.to_le_bytes().to_vec()),
    ] {
        let r = Robot::start(None);
        let t = deathswitch::monotonic_ns();
        poke(&r.page_path, offset, &bytes);
        assert_all_off_from_that_frame(&r.frames_from(t, 300), t, what);
        let page = Page::open(&r.page_path).unwrap();
        assert_eq!(page.reason(), Some(Reason::PageLost), "{what}");
        assert_eq!(
            page.snapshot().driver_pid,
            Some(r.rt.id()),
            "{what}: the runtime's identity is back"
        );
    }
}
