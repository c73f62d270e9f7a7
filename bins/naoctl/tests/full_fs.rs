//! A full filesystem under the page: a small
//! tmpfs is mounted in a private mount namespace (`unshare -m`, the test
//! re-runs itself inside it, so the mount vanishes with the child whatever
//! happens). Skipped, with the reason printed, where mounting is refused.
//!
//! Truncating the page to 0 on a full tmpfs, and creating a page on a full
//! tmpfs: no thread spins (the read returns: the SIGBUS handler maps
//! zeroed memory over the page when the file cannot hold it), the next read
//! is tripped `page-lost`, `check` allocates nothing while the filesystem
//! stays full, `naoctl status` and `naoctl stop` answer (bounded waits),
//! and once space is freed the page is whole again with the identity.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deathswitch::{Damage, Integrity, Page, Reason, Switch};
use nao_kit::alloc::{self, allocations};
use testkit::sh;

mod common;
use common::{naoctl_bounded, text};

const CHILD: &str = "NAOCTL_FULL_FS_CHILD";
const STARTED: &str = "full-fs child started";
const SKIP: i32 = 77;

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

/// Fills the filesystem at `dir` until it refuses a block.
fn fill(dir: &Path, name: &str) {
    // dd fails with ENOSPC once full: that is the point.
    sh(
        &format!("dd if=/dev/zero of=\"$1/{name}\" bs=4096 status=none"),
        dir,
    );
    assert!(
        !sh(
            &format!("dd if=/dev/zero of=\"$1/{name}.more\" bs=4096 count=1 status=none"),
            dir
        ),
        "the filesystem is not full"
    );
}

/// Both naoctl commands answer on the full filesystem and say what is
/// wrong; neither claims the stop landed when it could not write.
fn naoctl_answers(page: &Path, what: &str) {
    let (out, took) = naoctl_bounded(page, &["status"]);
    println!("{what}: naoctl status answered in {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out));
    assert!(text(&out).contains("TRIPPED"), "{what}: {}", text(&out));
    let (out, took) = naoctl_bounded(page, &["stop"]);
    println!("{what}: naoctl stop answered in {} ms", took.as_millis());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{what}: {t}");
    assert!(
        t.contains("No space left on device") && t.contains("is full") && t.contains("df "),
        "{what}: {t}"
    );
    assert!(t.contains("reads as tripped"), "{what}: {t}");
}

/// Runs `damage` with the robot's runtime stopped (SIGSTOP, then SIGCONT):
/// the damage and the filling of the filesystem land between two of its
/// checks. Returns the fault's time, taken once the runtime is stopped.
fn hold(robot: &common::Robot, dir: &Path, damage: impl FnOnce()) -> u64 {
    let pid = robot.rt.id();
    assert!(sh(&format!("kill -STOP {pid}"), dir));
    let t = deathswitch::monotonic_ns();
    damage();
    assert!(sh(&format!("kill -CONT {pid}"), dir));
    t
}

fn registered(page: &Page) {
    page.rearm();
    page.register(std::process::id());
    page.set_guard(77, true);
    assert!(page.snapshot().armed);
}

fn assert_identity(page: &Page) {
    let s = page.snapshot();
    assert_eq!(s.driver_pid, Some(std::process::id()), "{s:?}");
    assert_eq!((s.guard_pid, s.guard_holding), (Some(77), true), "{s:?}");
}

/// 100 checks while full: each says lost, none allocates.
fn checks_while_full(page: &Page, want: Integrity) {
    let n = allocations(|| {
        for _ in 0..100 {
            assert_eq!(page.check(), want);
            assert!(!page.snapshot().armed);
        }
    });
    assert_eq!(n, 0, "allocations in 100 checks on a full filesystem");
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert_eq!(
        page.damage(),
        Some(Damage::Unbacked {
            errno: libc::ENOSPC
        })
    );
}

/// With space (or a writable path) again: the next check mends the page
/// (`mended`), the one after finds it intact, tripped page-lost, with its
/// identity kept.
fn whole_again(page: &Page, mended: Integrity) {
    assert_eq!(page.check(), mended);
    assert_eq!(page.check(), Integrity::Intact, "{:?}", page.damage());
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert_identity(page);
}

/// Whether this process maps the file at `path`: a line of
/// `/proc/self/maps` with its device and inode.
fn maps_file(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    let dev = format!("{:02x}:{:02x}", libc::major(m.dev()), libc::minor(m.dev()));
    let ino = m.ino().to_string();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 5 && f[3] == dev && f[4] == ino
    })
}

fn truncate_to_zero_on_a_full_tmpfs(dir: &Path) {
    let path = dir.join("deathswitch");
    let page = Page::open(&path).unwrap();
    registered(&page);
    fill(dir, "filler");
    assert!(sh("truncate -s 0 \"$1/deathswitch\"", dir));
    fill(dir, "filler2"); // takes the page's freed block
    assert!(maps_file(&path), "the page maps its file");
    // The read faults; the file cannot hold the page; the handler maps
    // zeroed memory over it and the read returns: tripped page-lost.
    assert!(!page.snapshot().armed);
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert!(
        !maps_file(&path),
        "zeroed memory over the page, not the file"
    );
    page.write_heartbeat(3, deathswitch::monotonic_ns(), true); // no fault
    checks_while_full(&page, Integrity::Repaired);
    naoctl_answers(&path, "truncated to 0 on a full tmpfs");
    // Space again: the next check maps the file back, whole, page-lost.
    assert!(sh("rm -f \"$1/filler2\"", dir));
    whole_again(&page, Integrity::Repaired);
    let other = Page::open(&path).unwrap();
    assert_eq!(other.reason(), Some(Reason::PageLost));
    assert_eq!(other.snapshot().driver_pid, Some(std::process::id()));
    assert!(sh("rm -f \"$1\"/filler*", dir));
}

fn create_a_page_on_a_full_tmpfs(dir: &Path) {
    let path = dir.join("deathswitch");
    let page = Page::open(&path).unwrap();
    registered(&page);
    assert!(sh("rm -f \"$1/deathswitch\"", dir));
    fill(dir, "filler");
    checks_while_full(&page, Integrity::Replaced);
    // A fresh open fails at once with the fix, rather than faulting.
    let err = Page::open(&path).expect_err("no page on a full filesystem");
    assert!(err.to_string().contains("is full"), "{err}");
    naoctl_answers(&path, "created on a full tmpfs");
    assert!(sh("rm -f \"$1\"/filler*", dir));
    whole_again(&page, Integrity::Replaced);
}

fn deleted_page_in_a_read_only_directory(dir: &Path) {
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let path = ro.join("deathswitch");
    let page = Page::open(&path).unwrap();
    registered(&page);
    // A read-only bind mount of the directory over itself: the page's open
    // descriptor belongs to the tmpfs mount, the path now to a read-only one.
    assert!(sh(
        "rm -f \"$1/ro/deathswitch\" && mount --bind \"$1/ro\" \"$1/ro\" && \
         mount -o remount,bind,ro \"$1/ro\"",
        dir
    ));
    let n = allocations(|| {
        for _ in 0..100 {
            assert_eq!(page.check(), Integrity::Replaced);
        }
    });
    assert_eq!(n, 0, "allocations in 100 checks in a read-only directory");
    assert_eq!(page.damage(), Some(Damage::Path { errno: libc::EROFS }));
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert!(sh("umount \"$1/ro\"", dir));
    whole_again(&page, Integrity::Replaced);
}

/// With the robot's runtime held, `damage` (a script on `dir`) hits its
/// page and the filesystem is filled again (into `filler`): every frame
/// from then on is all-off, naoctl answers, then the space is freed.
fn fault_on_a_full_tmpfs(
    robot: &common::Robot,
    dir: &Path,
    damage: &str,
    filler: &str,
    what: &str,
) {
    let t = hold(robot, dir, || {
        assert!(sh(damage, dir));
        fill(dir, filler);
    });
    let frames = robot.frames_from(t, 400);
    common::assert_all_off_from_that_frame(&frames, t, what);
    naoctl_answers(&robot.page_path, what);
    assert!(sh("rm -f \"$1\"/filler*", dir));
}

/// The runtime's page on a full tmpfs, judged by the virtual robot's trace:
/// truncated to 0, then (after a re-arm and a wake) deleted; each time
/// every frame from then on is all-off and the runtime keeps cycling
/// (its cycle thread once faulted forever here: no frames at all).
fn runtime_on_a_full_tmpfs(dir: &Path) {
    let path = dir.join("deathswitch");
    let robot = common::Robot::start(Some(&path));
    fill(dir, "filler");
    // The truncation frees the page's block: the runtime is held while the
    // test fills it again, else (under load) it backs the page first and
    // there is no full filesystem left to test.
    fault_on_a_full_tmpfs(
        &robot,
        dir,
        "truncate -s 0 \"$1/deathswitch\"",
        "filler2",
        "runtime: truncated on a full tmpfs",
    );
    // The runtime's check maps the file back: a whole page-lost page with
    // its pid.
    let t0 = Instant::now();
    loop {
        if let Ok(i) = deathswitch::inspect(&path) {
            if i.damage.is_none() && i.snapshot.driver_pid == Some(robot.rt.id()) {
                assert_eq!(i.snapshot.reason, Some(Reason::PageLost));
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the page was not made whole"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Re-arm, wake, stiff again; then the page is deleted on a full tmpfs.
    Page::open(&path).unwrap().rearm();
    let mut tail = nao_rs_sim::Tail::new(robot.rig.trace_path());
    let stiff = |l: &nao_rs_sim::TraceLine| l.is_cycle_frame() && l.max_stiffness > 0;
    if tail
        .wait_for(Duration::from_secs(2), stiff)
        .unwrap()
        .is_none()
    {
        robot.wake();
        assert!(tail
            .wait_for(Duration::from_secs(10), stiff)
            .unwrap()
            .is_some());
    }
    fault_on_a_full_tmpfs(
        &robot,
        dir,
        "rm -f \"$1/deathswitch\"",
        "filler",
        "runtime: page deleted on a full tmpfs",
    );
}

fn child() {
    println!("{STARTED}");
    let dir = tempfile::tempdir().unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "nao-rs-full-fs-test"])
        .arg(dir.path())
        .output();
    match mount {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "skipped: mounting a tmpfs was refused: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            std::process::exit(SKIP);
        }
        Err(e) => {
            println!("skipped: `mount` could not run: {e}");
            std::process::exit(SKIP);
        }
    }
    truncate_to_zero_on_a_full_tmpfs(dir.path());
    create_a_page_on_a_full_tmpfs(dir.path());
    deleted_page_in_a_read_only_directory(dir.path());
    runtime_on_a_full_tmpfs(dir.path());
    let _ = Command::new("umount").arg(dir.path()).status();
}

#[test]
fn full_filesystem_no_thread_spins_the_next_read_is_page_lost_and_naoctl_answers() {
    const NAME: &str =
        "full_filesystem_no_thread_spins_the_next_read_is_page_lost_and_naoctl_answers";
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let mut c = match Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: `unshare` (util-linux) could not run: {e}");
            return;
        }
    };
    // A bound, not a timing assertion: a faulting-forever child fails here.
    let until = Instant::now() + Duration::from_secs(60);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "the full-filesystem child hung (a thread faulting or spinning):\n{}",
                text(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    let t = text(&out);
    print!("{t}");
    if !t.contains(STARTED) {
        println!("skipped: a private mount namespace was refused (`unshare -m`): {t}");
        return;
    }
    if out.status.code() == Some(SKIP) {
        return; // the child printed the reason
    }
    assert!(out.status.success(), "the child failed:\n{t}");
}
