//! Page damage, then a hang (the guard's part, with the runtime's
//! pidfd): for each kind of damage to the page of a stiff runtime, then a
//! re-arm (`naoctl rearm --yes`) and a wake (`nao-rs wake`), a SIGSTOP of
//! the runtime is taken over: the guard kills the right process (the one
//! it holds by its pidfd) and sends all-off frames. The same after the
//! damage with a runtime that never confirms a trip
//! (`nao-rs run --fault never-confirm`). Judged by the virtual robot's
//! trace.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{poll_for, wait_for, wake_until_stiff, GuardRig, Proc, Rig, Runtime};
use deathswitch::Page;
use nix::sys::signal::Signal;

#[derive(Debug, Clone, Copy)]
enum Damage {
    Truncate(u64),
    Zero,
    Garbage,
    GarbageKeepingMagicsAndVersion,
    InPlaceAnotherVersion,
    Delete,
    ReplaceByArmedCopy,
    ReplaceByGarbage,
    SymlinkToACopy,
}

const ALL: [Damage; 11] = [
    Damage::Truncate(0),
    Damage::Truncate(8),
    Damage::Truncate(64),
    Damage::Zero,
    Damage::Garbage,
    Damage::GarbageKeepingMagicsAndVersion,
    Damage::InPlaceAnotherVersion,
    Damage::Delete,
    Damage::ReplaceByArmedCopy,
    Damage::ReplaceByGarbage,
    Damage::SymlinkToACopy,
];

fn garbage(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..deathswitch::LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// Damages the page at `path`; `armed_copy` is a byte copy taken while it
/// was armed.
fn damage(d: Damage, path: &Path, armed_copy: &[u8]) {
    let dir = path.parent().unwrap();
    let swap = |bytes: &[u8]| {
        let tmp = dir.join("replacement");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    };
    match d {
        Damage::Truncate(n) => std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(n)
            .unwrap(),
        Damage::Zero => write_at(path, 0, &[0; deathswitch::LEN]),
        Damage::Garbage => write_at(path, 0, &garbage(7)),
        Damage::GarbageKeepingMagicsAndVersion => {
            let mut g = garbage(11);
            g[0..8].copy_from_slice(&deathswitch::MAGIC.to_le_bytes());
            g[8..12].copy_from_slice(&deathswitch::VERSION.to_le_bytes());
            g[deathswitch::LEN - 8..].copy_from_slice(&deathswitch::MAGIC.to_le_bytes());
            write_at(path, 0, &g);
        }
        Damage::InPlaceAnotherVersion => {
            write_at(path, 8, &(deathswitch::VERSION + 1).to_le_bytes())
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
        Damage::ReplaceByArmedCopy => swap(armed_copy),
        Damage::ReplaceByGarbage => swap(&garbage(13)),
        Damage::SymlinkToACopy => {
            let copy = dir.join("copy-of-the-page");
            std::fs::write(&copy, armed_copy).unwrap();
            std::fs::remove_file(path).unwrap();
            std::os::unix::fs::symlink(&copy, path).unwrap();
        }
    }
}

/// The virtual robot, an armed page and the guard on it.
struct Watched {
    guard: Proc,
    rig: Rig,
}

impl Watched {
    fn new() -> Watched {
        let rig = Rig::start();
        let page = Page::open(rig.page_path()).unwrap();
        let guard = rig.start_guard(0);
        page.rearm();
        Watched { guard, rig }
    }

    fn log(&self) -> String {
        self.rig.log("guard")
    }

    /// A stiff runtime the guard holds by its pidfd (it registered).
    /// Every start is limp: the test wakes it (as a person would).
    fn wait_registered(&self, rt: &mut Proc) {
        let pid = rt.pid();
        if !wake_until_stiff(&self.rig, "rt", rt, 0, Duration::from_secs(20)) {
            panic!(
                "no stiff frame from the runtime {pid} within 20 s\nguard:\n{}\nruntime:\n{}",
                self.log(),
                self.rig.log("rt")
            );
        }
        // Held by its identity and watched for its exit: the pidfd where
        // the kernel has one, the exit-watch connection everywhere.
        let line =
            format!("exit-watch connection bound: its exit is seen at once (pid), value: {pid}");
        wait_for(
            "the guard to register the runtime",
            Duration::from_secs(5),
            || self.log().contains(&line).then_some(()),
        );
    }

    /// The guard took over from `rt`: it exited (killed), and the guard
    /// sends all-off frames; no stiff frame after the guard's first.
    fn assert_taken_over(&self, rt: &mut Proc, what: &str) {
        let g = self.guard.pid();
        let f = poll_for(Duration::from_secs(3), || {
            let f = self.rig.frames();
            (f.iter().filter(|l| l.peer_pid as u32 == g).count() >= 3).then_some(f)
        });
        let Some(f) = f else {
            panic!(
                "{what}: no take-over (no frames from the guard):\n{}",
                self.log()
            );
        };
        assert!(
            rt.wait_exit(Duration::from_secs(2)).is_some(),
            "{what}: the guard did not kill the runtime:\n{}",
            self.log()
        );
        let first = f.iter().position(|l| l.peer_pid as u32 == g).unwrap();
        assert!(
            f[first..].iter().all(|l| l.all_off && l.max_stiffness == 0),
            "{what}: a stiff frame after the take-over"
        );
        let page = Page::open(self.rig.page_path()).unwrap();
        assert!(!page.snapshot().armed, "{what}");
    }
}

#[test]
fn page_damage_then_a_hang() {
    testkit::bin("nao-rs");
    let mut failures = Vec::new();
    for d in ALL {
        let w = Watched::new();
        let page_path = w.rig.page_path();
        let mut rt = w.rig.start_runtime(&Runtime::new("rt"));
        w.wait_registered(&mut rt);
        let copy = std::fs::read(page_path).unwrap();
        damage(d, page_path, &copy);
        // The damage trips (page-lost); a person re-arms and wakes, and
        // does it again if the robot stays limp (a holder may trip the
        // page at the path once more when it notices the damage late).
        std::thread::sleep(Duration::from_millis(100));
        let mut stiff = false;
        let mut woke = None;
        for _ in 0..5 {
            testkit::ok(w.rig.naoctl(&["rearm", "--yes"]), "naoctl rearm");
            let n = w.rig.frames().len();
            let st = w.rig.wake("rt");
            woke = Some(st.clone());
            if !st.status.success() {
                // Refused: tripped again (a holder noticed the damage
                // late); re-arm again.
                continue;
            }
            if poll_for(Duration::from_secs(1), || {
                w.rig.stiff_from(rt.pid(), n).then_some(())
            })
            .is_some()
            {
                stiff = true;
                break;
            }
        }
        if !stiff {
            failures.push(format!(
                "{d:?}: not stiff again after rearm and wake (last wake: {woke:?})\nguard: {}\nruntime: {}",
                w.log(),
                w.rig.log("rt")
            ));
            continue;
        }
        rt.signal(Signal::SIGSTOP);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.assert_taken_over(&mut rt, &format!("{d:?}"))
        }));
        if let Err(e) = r {
            failures.push(format!("{d:?}: {:?}", e.downcast_ref::<String>()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn page_damage_then_a_runtime_that_never_confirms() {
    let mut failures = Vec::new();
    for d in ALL {
        let w = Watched::new();
        let mut rt = w
            .rig
            .start_runtime(&Runtime::new("rt").fault("never-confirm"));
        w.wait_registered(&mut rt);
        let copy = std::fs::read(w.rig.page_path()).unwrap();
        damage(d, w.rig.page_path(), &copy);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.assert_taken_over(&mut rt, &format!("{d:?}"))
        }));
        if let Err(e) = r {
            failures.push(format!("{d:?}: {:?}", e.downcast_ref::<String>()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
