//! The exit watch (`deathswitch::exit_watch`): the guard sees the
//! runtime's exit at once through the runtime's connection, with and
//! without pidfds (the robot's Linux 4.4 has none: the guard then runs
//! under testkit's kernel 4.4 floor, every newer system call ENOSYS).
//! Judged by the page's reason (`guard-runtime-exited`: seen at once;
//! `guard-heartbeat-lost` would be the beat timeout's fallback) and the virtual
//! robot's trace (who sent each frame).

mod common;

use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use common::{guard_with_nofile, lowest_nofile_guard, runs, stiff_nao_rs_run, GuardRig};
use deathswitch::{Page, Reason};
use nix::sys::signal::Signal;
use testkit::{poll_for, Proc, Rig};

/// With or without pidfds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// This machine's kernel: pidfds (Linux 5.3 and later).
    Pidfd,
    /// The robot's: every system call newer than Linux 4.4 fails with ENOSYS.
    Kernel44,
}

const FLOORS: [Floor; 2] = [Floor::Pidfd, Floor::Kernel44];

fn floor(cmd: &mut Command, f: Floor) -> &mut Command {
    if f == Floor::Kernel44 {
        testkit::under_kernel_floor(cmd);
    }
    cmd
}

/// The rig, its page and the guard (UDP stop off) at floor `f`.
fn guarded_at(f: Floor) -> (Rig, Page, Proc) {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).expect("page");
    let guard = start_guard(&rig, f, "guard");
    (rig, page, guard)
}

fn start_guard(rig: &Rig, f: Floor, log: &str) -> Proc {
    let mut cmd = rig.guard_command(0);
    let g = Proc::spawn(
        "nao-rs-guard",
        floor(&mut cmd, f)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(rig.log_path(log)).unwrap()),
    );
    let page = Page::open(rig.page_path()).unwrap();
    testkit::wait_for(
        "the guard publishes itself",
        Duration::from_secs(10),
        || (page.snapshot().guard_pid == Some(g.pid())).then_some(()),
    );
    g
}

/// A stiff runtime whose exit-watch connection the guard has bound.
fn bound_runtime(rig: &Rig, name: &str, fault: Option<&str>, binds_before: usize) -> Proc {
    let rt = stiff_nao_rs_run(rig, name, fault);
    let bound = poll_for(Duration::from_secs(3), || {
        let n = rig
            .log("guard")
            .matches("exit-watch connection bound")
            .count();
        (n > binds_before).then_some(())
    });
    assert!(
        bound.is_some(),
        "the guard did not bind {name}'s connection within 3 s:\n{}",
        rig.log("guard")
    );
    rt
}

/// SIGKILL and a real segfault (`--fault crash-on-usr2`) of a stiff
/// runtime, with and without pidfds: taken over at once
/// (`guard-runtime-exited`, never the heartbeat's `guard-heartbeat-lost`),
/// the runtime's frames then only the guard's, all-off.
#[test]
fn exit_watch_sigkill_and_sigsegv_are_taken_over_at_once_with_and_without_pidfd() {
    for f in FLOORS {
        for (sig, fault) in [
            (Signal::SIGKILL, None),
            (Signal::SIGUSR2, Some("crash-on-usr2")),
        ] {
            let (rig, page, guard) = guarded_at(f);
            page.rearm();
            let mut rt = bound_runtime(&rig, "rt", fault, 0);
            rt.signal(sig);
            rt.wait_exit(Duration::from_secs(2))
                .expect("the runtime exits");
            let frames = rig.wait_frames_from(guard.pid(), 5, Duration::from_secs(5));
            let snap = page.snapshot();
            assert_eq!(snap.reason, Some(Reason::GuardRuntimeExited), "{f:?} {sig}");
            assert!(snap.guard_holding, "{f:?} {sig}");
            assert_eq!(runs(&frames), vec![rt.pid(), guard.pid()], "{f:?} {sig}");
            assert!(frames
                .iter()
                .filter(|l| l.peer_pid as u32 == guard.pid())
                .all(|l| l.all_off && l.max_stiffness == 0));
            let log = rig.log("guard");
            assert_eq!(
                log.contains("cannot open the runtime's pidfd"),
                f == Floor::Kernel44,
                "{f:?}: {log}"
            );
        }
    }
}

/// The guard stopped (SIGSTOP), the runtime killed meanwhile, the guard
/// continued 300 ms later: its first poll sees the closed connection (or
/// the pidfd) and takes over as from an exit, not from the stale
/// heartbeat.
#[test]
fn exit_watch_a_runtime_killed_while_the_guard_is_stopped_is_exited_on_sigcont() {
    for f in FLOORS {
        let (rig, page, guard) = guarded_at(f);
        page.rearm();
        let mut rt = bound_runtime(&rig, "rt", None, 0);
        guard.signal(Signal::SIGSTOP);
        rt.signal(Signal::SIGKILL);
        rt.wait_exit(Duration::from_secs(2))
            .expect("the runtime exits");
        std::thread::sleep(Duration::from_millis(300));
        guard.signal(Signal::SIGCONT);
        rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));
        assert_eq!(
            page.snapshot().reason,
            Some(Reason::GuardRuntimeExited),
            "{f:?}"
        );
        rig.wait_guard_log("guard-runtime-exited");
        assert!(!rig.log("guard").contains("guard-heartbeat-lost"), "{f:?}");
    }
}

/// Strangers (this test process: another pid) connect to the exit watch's
/// socket, answer its prompt, hold connections and close them, before and
/// after the runtime's is bound: nothing changes (the runtime keeps the
/// board, stiff; no trip). Its SIGKILL while they hold theirs is seen at
/// once.
#[test]
fn exit_watch_strangers_connecting_holding_and_closing_change_nothing() {
    use std::io::Write;
    for f in FLOORS {
        let (rig, page, guard) = guarded_at(f);
        page.rearm();
        let path = deathswitch::exit_watch::path(rig.page_path());
        let mut held: Vec<UnixStream> = (0..8)
            .filter_map(|_| UnixStream::connect(&path).ok())
            .collect();
        let rt = bound_runtime(&rig, "rt", None, 0);
        let count = page.snapshot().trip_count;
        for i in 0..200 {
            if let Ok(mut s) = UnixStream::connect(&path) {
                let _ = s.write_all(&[deathswitch::exit_watch::ANSWER]);
                if i % 4 == 0 {
                    held.push(s);
                }
            }
            if i % 10 == 0 {
                held.drain(..held.len() / 2);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(held.drain(..));
        std::thread::sleep(Duration::from_millis(200));
        let snap = page.snapshot();
        assert!(snap.armed && snap.trip_count == count, "{f:?}: {snap:?}");
        assert!(!snap.guard_holding, "{f:?}");
        assert!(rig.frames_from(guard.pid()).is_empty(), "{f:?}");
        assert!(
            rig.stiff_from(rt.pid(), rig.frames().len().saturating_sub(5)),
            "{f:?}"
        );
        // Strangers hold connections while the runtime dies: seen at once.
        let held: Vec<UnixStream> = (0..8)
            .filter_map(|_| UnixStream::connect(&path).ok())
            .collect();
        rt.signal(Signal::SIGKILL);
        rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));
        assert_eq!(
            page.snapshot().reason,
            Some(Reason::GuardRuntimeExited),
            "{f:?}"
        );
        drop(held);
    }
}

/// The guard restarts (SIGKILL, a new one) while the runtime runs: the
/// runtime connects to the new guard (every 50 ms) and is bound within a
/// second; its SIGKILL is then seen at once.
#[test]
fn exit_watch_a_restarted_guard_is_reconnected_and_sees_the_exit() {
    for f in FLOORS {
        let (rig, page, mut guard) = guarded_at(f);
        page.rearm();
        let rt = bound_runtime(&rig, "rt", None, 0);
        guard.signal(Signal::SIGKILL);
        guard
            .wait_exit(Duration::from_secs(2))
            .expect("the guard exits");
        let guard2 = start_guard(&rig, f, "guard2");
        let bound = poll_for(Duration::from_secs(1), || {
            rig.log("guard2")
                .contains("exit-watch connection bound")
                .then_some(())
        });
        assert!(
            bound.is_some(),
            "{f:?}: not bound within 1 s:\n{}",
            rig.log("guard2")
        );
        rt.signal(Signal::SIGKILL);
        rig.wait_frames_from(guard2.pid(), 3, Duration::from_secs(5));
        assert_eq!(
            page.snapshot().reason,
            Some(Reason::GuardRuntimeExited),
            "{f:?}"
        );
    }
}

/// At the lowest descriptor limit the guard starts at, with strangers
/// connecting to the exit watch meanwhile, the runtime's connection is
/// accepted (the reserve is let go for each accept) and its SIGKILL seen
/// at once; no accept failed.
#[test]
fn exit_watch_at_the_lowest_fd_limit_the_exit_is_seen_at_once() {
    for f in FLOORS {
        let rig = Rig::start();
        let page = Page::open(rig.page_path()).unwrap();
        let log = rig.log_path("guard");
        let (_, guard) = lowest_nofile_guard(&page, |n| {
            let mut cmd = guard_with_nofile(&rig, n, &log);
            Proc::spawn("nao-rs-guard", floor(&mut cmd, f))
        });
        page.rearm();
        let path = deathswitch::exit_watch::path(rig.page_path());
        let strangers: Vec<UnixStream> = (0..32)
            .filter_map(|_| UnixStream::connect(&path).ok())
            .collect();
        let rt = bound_runtime(&rig, "rt", None, 0);
        rt.signal(Signal::SIGKILL);
        rig.wait_frames_from(guard.pid(), 3, Duration::from_secs(5));
        assert_eq!(
            page.snapshot().reason,
            Some(Reason::GuardRuntimeExited),
            "{f:?}"
        );
        let text = rig.log("guard");
        assert!(!text.contains("cannot accept"), "{f:?}: {text}");
        assert!(!text.contains("out of file descriptors"), "{f:?}: {text}");
        drop(strangers);
    }
}
