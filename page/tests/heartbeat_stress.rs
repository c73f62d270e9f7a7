//! The heartbeat order under real concurrency: two million reads while a
//! writer beats; no read ever looks like an unconfirmed all-off for a
//! confirmed cycle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deathswitch::Page;

const READS: u64 = 2_000_000;

/// A thread beating cycles 0, 1, ... into `page` until `stop`, each at
/// `beat(cycle)` = (time, all-off); with `yielding`, it yields every 512
/// beats (on a loaded machine both threads may share one core: yielding
/// makes reads and beats interleave). Returns the beats written.
fn writer(
    page: &Arc<Page>,
    stop: &Arc<AtomicBool>,
    yielding: bool,
    beat: impl Fn(u64) -> (u64, bool) + Send + 'static,
) -> std::thread::JoinHandle<u64> {
    let (page, stop) = (page.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut cycle = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let (t, all_off) = beat(cycle);
            page.write_heartbeat(cycle, t, all_off);
            cycle += 1;
            if yielding && cycle & 511 == 0 {
                std::thread::yield_now();
            }
        }
        cycle
    })
}

#[test]
fn two_million_concurrent_reads_never_see_an_unconfirmed_all_off_for_a_confirmed_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let page = Arc::new(Page::open(&dir.path().join("deathswitch")).unwrap());
    page.trip(deathswitch::Reason::Naoctl);
    let stop = Arc::new(AtomicBool::new(false));
    // The writer: every frame all-off (the switch is tripped), so every
    // cycle is confirmed; a reader must always see confirmation >= cycle.
    let writer = writer(&page, &stop, true, |cycle| (cycle * 12, true));
    let mut seen = 0u64;
    let mut bad = 0u64;
    let mut first_bad = None;
    let mut distinct = 0u64;
    let mut last = None;
    for n in 0..READS {
        if n & 511 == 0 {
            std::thread::yield_now();
        }
        let s = page.snapshot();
        if let Some(c) = s.last_cycle {
            seen += 1;
            if last != Some(c) {
                distinct += 1;
                last = Some(c);
            }
            let confirmed = s.all_off_confirmed_cycle.is_some_and(|a| a >= c);
            let time_matches = s.last_beat_ns.is_some_and(|t| t >= c * 12);
            if !confirmed || !time_matches {
                bad += 1;
                first_bad.get_or_insert(s);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert_eq!(bad, 0, "first bad read: {first_bad:?}");
    assert!(written > 0);
    eprintln!("{READS} reads, {seen} with a beat, {distinct} distinct cycles, {written} beats");
}

#[test]
fn mixed_frames_confirmation_never_lags_a_confirmed_cycle() {
    // Alternating all-off and stiff frames: whenever the cycle read is an
    // all-off one (even), its confirmation must be visible.
    let dir = tempfile::tempdir().unwrap();
    let page = Arc::new(Page::open(&dir.path().join("deathswitch")).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = writer(&page, &stop, false, |cycle| (cycle, cycle & 1 == 0));
    let mut bad = 0u64;
    for _ in 0..READS / 4 {
        let s = page.snapshot();
        if let Some(c) = s.last_cycle {
            let confirmed = s.all_off_confirmed_cycle.is_some_and(|a| a >= c);
            if c & 1 == 0 && !confirmed {
                bad += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(bad, 0);
}
