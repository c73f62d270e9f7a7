//! Restarts and the robot's own processes: the guard against pids stored
//! in the page by others or reused by unrelated processes, against stray
//! signals, a low file descriptor limit and a second guard. Each test
//! starts the virtual robot, the guard and the runtime (`nao-rs run`, with
//! `--fault KIND` where it must hang) as separate processes and is judged
//! by the simulator's trace (`peer_pid`, `t_ns`: CLOCK_MONOTONIC). A hang
//! before the first beat and a hand-over to a runtime that freezes are
//! orderings in time: world cases (`bins/nao-rs-world/tests/cases.rs`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    guarded, hang_taken_over, lowest_nofile_guard, poll_for, stiff_nao_rs_run, wait_for, GuardRig,
    Proc, Rig, Runtime,
};
use deathswitch::{Page, Reason, Switch};
use nao_rs_guard::signals::ends_the_guard;
use nao_rs_sim::TraceLine;
use nix::sys::signal::Signal;

const MS: u64 = 1_000_000;

/// Crash a stiff runtime: the guard holds the board (all-off frames).
fn guard_holding(rig: &Rig, page: &Page, guard: &Proc) -> Proc {
    page.rearm();
    let mut rt = stiff_nao_rs_run(rig, "rt1", None);
    rt.signal(Signal::SIGKILL);
    rt.wait_exit(Duration::from_secs(2)).expect("killed");
    rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));
    assert!(page.snapshot().guard_holding);
    rt
}

/// Every gap between two consecutive frames of `pid` from `from_ns` on.
fn max_gap_ms(frames: &[TraceLine], from_ns: u64) -> f64 {
    let t: Vec<u64> = frames
        .iter()
        .map(|l| l.t_ns)
        .filter(|&t| t >= from_ns)
        .collect();
    t.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as f64 / 1e6
}

/// While the guard holds the board, a live pid stored in `driver_pid` by
/// another process (init, the simulator, an unrelated process; with the
/// page's API, which stores its true start time, or as raw bytes with
/// none or a wrong one) never makes it let the board go: its all-off
/// frames go on, nobody is signalled, and a real restart is still handed
/// the board.
#[test]
fn a_live_pid_stored_in_driver_pid_never_takes_the_board_from_the_guard() {
    let (rig, page, guard) = guarded();
    guard_holding(&rig, &page, &guard);
    let mut bystander = Proc::spawn("sleep", Command::new("sleep").arg("60"));
    let from = deathswitch::monotonic_ns();
    // Raw writes are not one store: the start time goes to 0 first, so
    // between the writes the page names a pid with no start time (nothing
    // to verify, kept) and whenever the guard polls, it judges only the
    // pid and start each case stores, never a mix of two cases.
    let raw = |pid: u32, start: u64| {
        testkit::poke(rig.page_path(), 88, &0u64.to_le_bytes());
        testkit::poke(rig.page_path(), 32, &pid.to_le_bytes());
        testkit::poke(rig.page_path(), 88, &start.to_le_bytes());
    };
    let bystander_pid = bystander.pid();
    let bystander_start = deathswitch::process::start_time(bystander_pid).unwrap();
    type Store<'a> = Box<dyn Fn() + 'a>;
    let ways: Vec<(&str, Store)> = vec![
        ("pid 1, page API", Box::new(|| page.register(1))),
        (
            "the simulator, page API",
            Box::new(|| page.register(rig.sim_pid())),
        ),
        (
            "an unrelated process, page API",
            Box::new(|| page.register(bystander_pid)),
        ),
        ("pid 1, raw, no start time", Box::new(|| raw(1, 0))),
        (
            "the simulator, raw, no start time",
            Box::new(|| raw(rig.sim_pid(), 0)),
        ),
        (
            "an unrelated process, raw, a wrong start time",
            Box::new(|| raw(bystander_pid, bystander_start + 1)),
        ),
    ];
    for (what, store) in &ways {
        store();
        std::thread::sleep(Duration::from_millis(300));
        let s = page.snapshot();
        assert!(s.guard_holding, "{what}: the guard let the board go");
        assert!(bystander.running(), "{what}: the bystander was signalled");
    }
    // What was stored last, a live pid with a wrong start time, is a reused
    // pid to the guard: it clears it from the page (and signals nobody).
    wait_for(
        "the guard to clear a live pid with a wrong start time from the page",
        Duration::from_secs(5),
        || page.snapshot().driver_pid.is_none().then_some(()),
    );
    assert!(bystander.running(), "the bystander was signalled");
    let frames = rig.frames_from(guard.pid());
    let gap = max_gap_ms(&frames, from);
    assert!(
        gap < 100.0,
        "the guard's all-off frames stopped for {gap:.1} ms while pids were stored \
         (frames at ms after the first store: {:?})\nguard:\n{}",
        frames
            .iter()
            .filter(|l| l.t_ns >= from)
            .map(|l| (l.t_ns - from) / MS)
            .collect::<Vec<_>>(),
        rig.log("guard")
    );
    assert!(frames.iter().all(|l| l.all_off));
    assert!(
        rig.frames()
            .iter()
            .all(|l| l.t_ns < from || l.peer_pid as u32 == guard.pid()),
        "only the guard sent frames"
    );
    rig.wait_guard_log("never signalled");
    // A real restart is still handed the board.
    let rt2 = rig.start_runtime(&Runtime::new("rt2"));
    rig.wait_frames_from(rt2.pid(), 10, Duration::from_secs(20));
    assert!(!page.snapshot().guard_holding);
}

/// Makes a process with pid `pid` in this (the initial) pid namespace:
/// root writes `/proc/sys/kernel/ns_last_pid`, then forks; other processes
/// on the machine may take the pid first, so it tries a few times.
fn process_with_pid(pid: u32) -> Option<Proc> {
    for _ in 0..50 {
        if std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).is_err() {
            return None;
        }
        let p = Proc::spawn("sleep", Command::new("sleep").arg("60"));
        if p.pid() == pid {
            return Some(p);
        }
    }
    None
}

/// The runtime's pid, reused by an unrelated process after the runtime
/// died with no guard running; then the guard starts. It finds the pid in
/// the page with another start time: it clears it and never signals it;
/// the dead runtime's beat left in the page is taken over as an exited
/// runtime's (`guard-runtime-exited`), without a kill (all-off frames). With root the pid is really reused (`ns_last_pid`); elsewhere
/// (and in addition) an unrelated live pid is written beside the dead
/// runtime's start time.
#[test]
fn a_reused_pid_in_the_page_is_never_signalled() {
    let root = nix::unistd::Uid::effective().is_root();
    if !root {
        println!(
            "a_reused_pid_in_the_page_is_never_signalled: not root, cannot choose a pid \
             (/proc/sys/kernel/ns_last_pid); simulating the reuse by writing an unrelated live pid"
        );
    }
    for real in [true, false] {
        let rig = Rig::start();
        let page = Page::open(rig.page_path()).unwrap();
        page.rearm();
        let mut rt = stiff_nao_rs_run(&rig, "rt", None);
        let (rt_pid, rt_start) = (rt.pid(), page.snapshot().driver_start);
        rt.signal(Signal::SIGKILL);
        rt.wait_exit(Duration::from_secs(2)).unwrap();
        let reused = if real && root {
            match process_with_pid(rt_pid) {
                Some(p) => p,
                None => {
                    println!(
                        "could not get pid {rt_pid} back in 50 tries (busy machine): simulated"
                    );
                    continue;
                }
            }
        } else if real {
            continue;
        } else {
            let p = Proc::spawn("sleep", Command::new("sleep").arg("60"));
            testkit::poke(rig.page_path(), 32, &p.pid().to_le_bytes());
            p
        };
        let mut reused = reused;
        let s = page.snapshot();
        assert_eq!(
            (s.driver_pid, s.driver_start),
            (Some(reused.pid()), rt_start)
        );
        let guard = rig.start_guard(0);
        let frames = poll_for(Duration::from_secs(5), || {
            let f = rig.frames_from(guard.pid());
            (f.len() >= 5).then_some(f)
        })
        .unwrap_or_else(|| panic!("real {real}: no take-over:\n{}", rig.log("guard")));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            reused.running(),
            "real {real}: the guard signalled pid {}",
            reused.pid()
        );
        assert!(frames.iter().all(|l| l.all_off && l.max_stiffness == 0));
        let s = page.snapshot();
        assert_ne!(s.driver_pid, Some(reused.pid()), "cleared from the page");
        assert_eq!(s.reason, Some(Reason::GuardRuntimeExited));
        assert!(s.guard_holding);
        rig.wait_guard_log("never signalled");
    }
}

/// Stray signals: the guard ignores every asynchronous signal but TERM
/// and INT (sent here from the test, a second process), stays in the page
/// and still takes a later hang over; TERM or INT then end it cleanly and
/// it withdraws from the page.
#[test]
fn the_guard_survives_every_signal_but_term_and_int() {
    for end in [Signal::SIGTERM, Signal::SIGINT] {
        let (rig, page, mut guard) = guarded();
        // Every standard and real-time signal (not glibc's own 32 and 33)
        // but those that end the guard by design and SIGSTOP.
        let sigs: Vec<i32> = (1..=31)
            .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
            .filter(|&s| s != libc::SIGSTOP && !ends_the_guard(s))
            .collect();
        for &sig in &sigs {
            // SAFETY: kill(2) of our own child with a signal number.
            assert_eq!(unsafe { libc::kill(guard.pid() as i32, sig) }, 0);
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(guard.running(), "a signal of {sigs:?} ended the guard");
        let s = page.snapshot();
        assert_eq!(s.guard_pid, Some(guard.pid()));
        assert_eq!(
            s.guard_start,
            deathswitch::process::start_time(guard.pid()).unwrap(),
            "the guard's identity is in the page"
        );
        // A later hang is taken over.
        page.rearm();
        let (_rt, frames) = hang_taken_over(&rig, guard.pid(), 5);
        assert!(frames.iter().all(|l| l.all_off));
        assert_eq!(page.snapshot().reason, Some(Reason::GuardHeartbeatLost));
        // TERM / INT: a clean exit that withdraws from the page.
        guard.signal(end);
        let st = guard
            .wait_exit(Duration::from_secs(3))
            .expect("ends on TERM/INT");
        assert!(st.success(), "{end}: {st:?}");
        let s = page.snapshot();
        assert_eq!((s.guard_pid, s.guard_start), (None, 0), "{end}");
    }
}

/// The guard started with `RLIMIT_NOFILE` `n` (set in the child before
/// exec), its stderr captured.
fn guard_with_nofile(rig: &Rig, n: u64, log: &std::path::Path) -> Proc {
    Proc::spawn("nao-rs-guard", &mut common::guard_with_nofile(rig, n, log))
}

/// At `nofile 6` the guard cannot keep the descriptors a take-over needs:
/// it refuses to start, naming the limit and the fix, and never writes the
/// page. At the lowest limit it does start at, it takes a hang over with
/// all-off frames (the board's descriptors are in its reserve).
#[test]
fn at_a_low_fd_limit_the_guard_refuses_to_start_or_can_take_over() {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    let log = rig.dir().join("guard.log");
    let mut g = guard_with_nofile(&rig, 6, &log);
    let st = g
        .wait_exit(Duration::from_secs(5))
        .expect("refuses to start");
    assert!(!st.success());
    let text = std::fs::read_to_string(&log).unwrap();
    for want in ["RLIMIT_NOFILE 6", "LimitNOFILE=", "ulimit -n"] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("no device"), "{text}");
    assert_eq!(page.snapshot().guard_pid, None, "the page untouched");

    // The lowest limit the guard starts at.
    let (n, guard) = lowest_nofile_guard(&page, |n| guard_with_nofile(&rig, n, &log));
    println!("the guard starts at RLIMIT_NOFILE {n}");
    page.rearm();
    let (_rt, frames) = hang_taken_over(&rig, guard.pid(), 5);
    assert!(frames.iter().all(|l| l.all_off && l.max_stiffness == 0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("out of file descriptors"), "{text}");
}

/// One guard per page: a second `nao-rs-guard` on the same page exits
/// non-zero naming the first guard's pid, before it touches the page: the
/// trip count does not move, a re-arm holds, the first guard stays in the
/// page and on watch.
#[test]
fn a_second_guard_refuses_to_start_naming_the_first() {
    let (rig, page, guard) = guarded();
    page.rearm();
    let count = page.snapshot().trip_count;
    let log = rig.dir().join("guard2.log");
    let mut second = Proc::spawn(
        "second nao-rs-guard",
        rig.guard_command(0)
            .stderr(std::fs::File::create(&log).unwrap()),
    );
    let st = second
        .wait_exit(Duration::from_secs(5))
        .expect("the second guard exits");
    assert!(!st.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("pid {}", guard.pid())),
        "the first guard's pid is not named:\n{text}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let s = page.snapshot();
    assert_eq!(s.trip_count, count, "the page was repaired or tripped");
    assert!(s.armed, "the re-arm holds");
    assert_eq!(s.guard_pid, Some(guard.pid()));
    assert!(!rig.log("guard").contains("PageRepaired"));
    // Still on watch.
    hang_taken_over(&rig, guard.pid(), 3);
}
