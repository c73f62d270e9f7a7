//! The thin I/O of the bench: the virtual robot with its trace, the guard
//! and the runtime on a private folder (a `testkit::Rig`, its programs as
//! `testkit::Proc`s killed on drop), the trace read as it grows, and the
//! readings of `/proc`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deathswitch::Page;
use nao_rs_sim::{Tail, TraceLine};
use testkit::Runtime;
pub use testkit::{free_udp_port, Proc, Programs};

/// The sim's SCHED_FIFO priority: above the runtime's cycle (30), below the
/// guard (40). It stands for the chest board, which is hardware.
pub const SIM_PRIORITY: i32 = 35;

/// The name the bench's runtime is started with (its log and wake socket).
const RUNTIME: &str = "runtime";

/// The programs the bench needs, in `dir` or (`None`) next to this program.
pub fn find_programs(dir: Option<&Path>) -> Result<Programs, String> {
    Programs::find(dir, &["nao-rs", "nao-rs-sim", "nao-rs-guard", "naoctl"])
}

/// The program `name` of `programs` (of the package of that name), or an
/// error naming the fix when it was not built (the app and the beacon are
/// checked only where they are used).
pub fn program(programs: &Programs, name: &str) -> Result<PathBuf, String> {
    let p = programs.path(name);
    if !p.exists() {
        return Err(format!(
            "{} not found; build it (`cargo build --release -p {name}`) or give --bin-dir",
            p.display()
        ));
    }
    Ok(p)
}

/// The virtual robot, the guard, the runtime and the page, on private paths.
pub struct Rig {
    /// The UDP stop port (the guard's).
    pub udp_port: u16,
    /// The page, mapped in the bench.
    pub page: Page,
    /// Every frame of the trace read so far.
    pub frames: Vec<TraceLine>,
    /// The sim runs at SCHED_FIFO [`SIM_PRIORITY`].
    pub sim_fifo: bool,
    /// Runtimes started so far.
    pub runtime_starts: u32,
    /// More arguments of `nao-rs run` (`--chest-button hold:MS`).
    pub runtime_args: Vec<String>,
    tail: Tail,
    // Dropped in this order: the runtime, the guard, then the rig (the
    // sim, then its folder).
    runtime: Option<Proc>,
    guard: Option<Proc>,
    rig: testkit::Rig,
}

impl Rig {
    /// Starts the virtual robot (with its trace) and the guard on a new
    /// private folder and a free UDP port. The runtime is started with
    /// [`Rig::start_runtime`].
    pub fn start(programs: Programs) -> Result<Rig, String> {
        Rig::start_with(programs, true)
    }

    /// As [`Rig::start`], with the guard only when `guard` (the robots of
    /// the STOP ALL figure have none: their runtime reads the stop port).
    pub fn start_with(programs: Programs, guard: bool) -> Result<Rig, String> {
        let rig = testkit::RigSpec {
            programs,
            sim_args: Vec::new(),
            sim_priority: Some(SIM_PRIORITY),
            page: None,
            // The bench measures the robot's own bounds.
            guard_bounds: testkit::GuardBounds::Robot,
        }
        .try_start()?;
        let page = Page::open(rig.page_path())
            .map_err(|e| format!("cannot create the page {}: {e}", rig.page_path().display()))?;
        let sim_fifo =
            policy(rig.sim_pid() as i32, None).is_some_and(|(p, _)| p == libc::SCHED_FIFO);
        let udp_port = free_udp_port();
        let guard = if guard {
            let g = rig.try_start_guard(udp_port)?;
            // The UDP thread binds right after; give it a moment.
            std::thread::sleep(Duration::from_millis(100));
            Some(g)
        } else {
            None
        };
        Ok(Rig {
            tail: Tail::new(rig.trace_path()),
            udp_port,
            page,
            frames: Vec::new(),
            sim_fifo,
            runtime_starts: 0,
            runtime_args: Vec::new(),
            runtime: None,
            guard,
            rig,
        })
    }

    /// The private folder.
    pub fn dir(&self) -> &Path {
        self.rig.dir()
    }

    /// The page's path.
    pub fn page_path(&self) -> &Path {
        self.rig.page_path()
    }

    /// The program `name`.
    pub fn program(&self, name: &str) -> PathBuf {
        self.rig.program(name)
    }

    /// Where the programs come from.
    pub fn programs(&self) -> &Programs {
        self.rig.programs()
    }

    /// The sim's control socket.
    pub fn ctl_path(&self) -> PathBuf {
        self.rig.ctl_path()
    }

    /// The sim's board socket.
    pub fn sim_socket(&self) -> PathBuf {
        self.rig.sim_socket()
    }

    /// The runtime's wake socket.
    pub fn wake_path(&self) -> PathBuf {
        self.rig.wake_socket(RUNTIME)
    }

    /// The runtime's status file.
    pub fn status_path(&self) -> PathBuf {
        self.dir().join("status.json")
    }

    /// The guard's pid.
    pub fn guard_pid(&self) -> i32 {
        self.guard.as_ref().map_or(0, |g| g.pid() as i32)
    }

    /// Stops the guard and starts a new one on the same page and port,
    /// under testkit's kernel 4.4 floor when `floor` (every system call
    /// newer than Linux 4.4 fails with ENOSYS: no pidfds, as on the
    /// robot); waits (10 s at most) until it has published itself. A
    /// running runtime is verified and held by the new guard (and, under
    /// the floor, watched through its exit-watch connection).
    pub fn restart_guard(&mut self, floor: bool) -> Result<(), String> {
        self.guard = None;
        let mut cmd = self.rig.guard_command(self.udp_port);
        if floor {
            testkit::under_kernel_floor(&mut cmd);
        }
        let log = self
            .rig
            .log_path(if floor { "guard-floor" } else { "guard" });
        // The log is appended to: only what the new guard writes counts.
        let before = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let g = Proc::try_spawn("nao-rs-guard", &mut cmd, Some(&log))?;
        let pid = g.pid();
        self.guard = Some(g);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.page.snapshot().guard_pid != Some(pid) {
            if Instant::now() > deadline {
                return Err(format!(
                    "the restarted guard (pid {pid}) did not publish itself within 10 s: {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // The UDP thread takes the stop socket right after (from the
        // running runtime's hand-over, or by its own bind): wait until it
        // holds it, so a trial that freezes the next runtime never leaves
        // the port with no live reader (docs/guard.md, the one gap).
        while !std::fs::read(&log).is_ok_and(|l| {
            String::from_utf8_lossy(l.get(before..).unwrap_or_default())
                .contains("UDP stop listening")
        }) {
            if Instant::now() > deadline {
                return Err(format!(
                    "the restarted guard (pid {pid}) did not hold the stop socket within 10 s: {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// The runtime's pid (0: none running).
    pub fn runtime_pid(&self) -> i32 {
        self.runtime.as_ref().map_or(0, |r| r.pid() as i32)
    }

    /// The running runtime.
    pub fn runtime(&mut self) -> Option<&mut Proc> {
        self.runtime.as_mut()
    }

    /// Forgets the runtime after it was reaped (or kills it).
    pub fn drop_runtime(&mut self) {
        self.runtime = None;
    }

    /// Starts `nao-rs run --controller stand` on the sim and waits (10 s at
    /// most) for its first cycle frame in the trace.
    pub fn start_runtime(&mut self) -> Result<(), String> {
        let pid = self.spawn_runtime()?;
        let from = self.frames.len();
        let got = self.wait_frame(from, Duration::from_secs(10), |f| {
            f.peer_pid == pid && f.is_cycle_frame()
        })?;
        if got.is_none() {
            let log = self
                .runtime
                .as_ref()
                .map(|r| r.log_tail(8))
                .unwrap_or_default();
            return Err(format!(
                "`nao-rs run` (pid {pid}) sent no cycle frame within 10 s:\n{log}"
            ));
        }
        Ok(())
    }

    /// Starts `nao-rs run --controller stand` on the sim; its pid. Does not
    /// wait for anything.
    pub fn spawn_runtime(&mut self) -> Result<i32, String> {
        self.runtime = None;
        let rt = Runtime::new(RUNTIME)
            .udp_port(self.udp_port)
            .arg("--status-file")
            .arg(self.status_path())
            .args(&self.runtime_args);
        let rt = self.rig.try_start_runtime(&rt)?;
        let pid = rt.pid() as i32;
        self.runtime = Some(rt);
        self.runtime_starts += 1;
        Ok(pid)
    }

    /// Stops the running runtime (SIGTERM: it trips `shutdown`, sends its
    /// last all-off frame and exits), then starts one with `args` more
    /// (the guard hands the board over).
    pub fn restart_runtime(&mut self, args: Vec<String>) -> Result<(), String> {
        if let Some(rt) = self.runtime.as_mut() {
            rt.try_signal(nix::sys::signal::Signal::SIGTERM)?;
            if rt.wait_exit(Duration::from_secs(5)).is_none() {
                return Err("the runtime did not end on SIGTERM within 5 s".into());
            }
        }
        self.runtime = None;
        self.runtime_args = args;
        self.start_runtime()
    }

    /// Reads the new trace lines into [`Rig::frames`].
    pub fn poll(&mut self) -> Result<(), String> {
        let new = self.tail.poll().map_err(|e| e.to_string())?;
        self.frames.extend(new);
        Ok(())
    }

    /// Waits up to `timeout` for a frame at index `from` or later that
    /// satisfies `pred`.
    pub fn wait_frame(
        &mut self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&TraceLine) -> bool,
    ) -> Result<Option<TraceLine>, String> {
        let end = Instant::now() + timeout;
        let mut i = from;
        loop {
            self.poll()?;
            while i < self.frames.len() {
                if pred(&self.frames[i]) {
                    return Ok(Some(self.frames[i]));
                }
                i += 1;
            }
            if Instant::now() >= end {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Keeps reading the trace for `d`.
    pub fn collect_for(&mut self, d: Duration) -> Result<(), String> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.poll()?;
            std::thread::sleep(Duration::from_millis(20));
        }
        self.poll()
    }
}

/// The tids of `pid`'s threads with their names.
pub fn threads(pid: i32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in rd.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        out.push((tid, comm.trim().to_string()));
    }
    out
}

/// The tid of `pid`'s thread named `name`.
pub fn thread_named(pid: i32, name: &str) -> Option<i32> {
    threads(pid)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(t, _)| t)
}

/// The fields of a `/proc/.../stat` line after the command name
/// (field 3, the state, is index 0).
pub fn stat_fields(text: &str) -> Vec<&str> {
    match text.rfind(')') {
        Some(i) => text[i + 1..].split_whitespace().collect(),
        None => Vec::new(),
    }
}

/// The scheduling policy and real-time priority of thread `tid` of `pid`
/// (the process's main thread when `tid` is `None`).
pub fn policy(pid: i32, tid: Option<i32>) -> Option<(i32, u32)> {
    let path = match tid {
        Some(t) => format!("/proc/{pid}/task/{t}/stat"),
        None => format!("/proc/{pid}/stat"),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let f = stat_fields(&text);
    // Field 40 is rt_priority, field 41 the policy.
    let prio = f.get(37)?.parse().ok()?;
    let pol = f.get(38)?.parse().ok()?;
    Some((pol, prio))
}

/// A policy's name.
pub fn policy_name(p: i32) -> &'static str {
    match p {
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        libc::SCHED_OTHER => "SCHED_OTHER",
        libc::SCHED_BATCH => "SCHED_BATCH",
        libc::SCHED_IDLE => "SCHED_IDLE",
        _ => "other",
    }
}

/// CPU time of thread `tid` (from `/proc/PID/task/TID/schedstat`), ns.
pub fn thread_cpu_ns(pid: i32, tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// CPU time of every live thread of `pid`, summed, ns.
pub fn process_cpu_ns(pid: i32) -> Option<u64> {
    let ts = threads(pid);
    if ts.is_empty() {
        return None;
    }
    Some(ts.iter().filter_map(|(t, _)| thread_cpu_ns(pid, *t)).sum())
}

/// The resident memory of `pid` (VmRSS), kB.
pub fn rss_kb(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&text)
}

/// The `VmRSS:` value of a `/proc/PID/status` text, kB.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_readers_parse_vm_rss_and_stat_fields() {
        assert_eq!(
            parse_vm_rss("Name:\tx\nVmRSS:\t   5120 kB\nVmSwap: 0 kB\n"),
            Some(5120)
        );
        assert_eq!(parse_vm_rss("Name: x\n"), None);
        let f = stat_fields("12 (a b) c) S 1 2 3");
        assert_eq!(f, vec!["S", "1", "2", "3"]);
        let me = std::process::id() as i32;
        assert!(rss_kb(me).unwrap() > 0);
        assert!(process_cpu_ns(me).is_some());
        assert!(policy(me, None).is_some());
    }
}
