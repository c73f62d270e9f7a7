//! The thin I/O of the bench: a private folder, the three programs (the
//! virtual robot with its trace, the guard, the runtime) as child processes
//! killed on drop, and the readings of `/proc`.

use std::fs::OpenOptions;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deathswitch::Page;
use nao_rs_sim::{Tail, TraceLine};

/// The sim's SCHED_FIFO priority: above the runtime's cycle (30), below the
/// guard (40). It stands for the chest board, which is hardware.
pub const SIM_PRIORITY: i32 = 35;

/// A private folder (mode 0700) removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `nao-rs-bench-<pid>-<ns>` in the system's temp folder.
    pub fn new() -> Result<TempDir, String> {
        let base = std::env::temp_dir();
        let path = base.join(format!(
            "nao-rs-bench-{}-{}",
            std::process::id(),
            deathswitch::now_ns()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| {
                format!(
                    "cannot create the private folder {}: {e}; set TMPDIR to a writable folder",
                    path.display()
                )
            })?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    name: &'static str,
    child: Child,
    reaped: bool,
    log: PathBuf,
}

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `sig` (SIGSTOP, SIGKILL, ...).
    pub fn signal(&self, sig: nix::sys::signal::Signal) -> Result<(), String> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).map_err(|e| {
            format!(
                "cannot send {sig} to {} (pid {}): {e}",
                self.name,
                self.pid()
            )
        })
    }

    /// Waits up to `timeout` for it to exit; true when it did.
    pub fn reap(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.reaped = true;
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// True while it has not exited.
    pub fn alive(&mut self) -> bool {
        !self.reaped && matches!(self.child.try_wait(), Ok(None))
    }

    /// The last lines of its log (stderr and stdout), for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(8);
        lines[from..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `cmd` with stdout and stderr appended to `log`.
pub fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> Result<Proc, String> {
    let open = || {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("cannot open the log {}: {e}", log.display()))
    };
    cmd.stdin(Stdio::null()).stdout(open()?).stderr(open()?);
    // SAFETY: runs in the forked child before exec and only calls prctl, an
    // async-signal-safe system call: the child gets SIGKILL when the bench
    // dies, so no program outlives a killed bench.
    unsafe {
        cmd.pre_exec(|| {
            let _ = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {name} ({}): {e}; build it (`cargo build --bin {name}`) or give --bin-dir",
            cmd.get_program().to_string_lossy()
        )
    })?;
    Ok(Proc {
        name,
        child,
        reaped: false,
        log: log.to_path_buf(),
    })
}

/// The programs the bench runs.
#[derive(Debug, Clone)]
pub struct Bins {
    /// The runtime host (for `nao-rs run`).
    pub nao_rs: PathBuf,
    /// The virtual robot.
    pub sim: PathBuf,
    /// The guard.
    pub guard: PathBuf,
    /// `naoctl`.
    pub naoctl: PathBuf,
    /// The operator's app (STOP ALL); checked only where it is used.
    pub app: PathBuf,
    /// The robot's beacon service; checked only where it is used.
    pub beacon: PathBuf,
}

impl Bins {
    /// The programs in `dir`, or next to this executable.
    pub fn find(dir: Option<&Path>) -> Result<Bins, String> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find this program's path: {e}; give --bin-dir"))?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        let bins = Bins {
            nao_rs: dir.join("nao-rs"),
            sim: dir.join("nao-rs-sim"),
            guard: dir.join("nao-rs-guard"),
            naoctl: dir.join("naoctl"),
            app: dir.join("nao-rs-app"),
            beacon: dir.join("nao-rs-beacon"),
        };
        for p in [&bins.nao_rs, &bins.sim, &bins.guard, &bins.naoctl] {
            if !p.exists() {
                return Err(format!(
                    "{} not found; build the workspace's programs (`cargo build --bins`) or give \
                     --bin-dir DIR with nao-rs, nao-rs-sim, nao-rs-guard and naoctl",
                    p.display()
                ));
            }
        }
        Ok(bins)
    }
}

/// A free UDP port on the loopback (bound and released).
pub fn free_udp_port() -> Result<u16, String> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot find a free UDP port on 127.0.0.1: {e}"))?;
    s.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot read the free UDP port: {e}"))
}

/// The virtual robot, the guard, the runtime and the page, on private paths.
pub struct Rig {
    /// The programs.
    pub bins: Bins,
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
    tail: Tail,
    runtime: Option<Proc>,
    guard: Option<Proc>,
    sim: Option<Proc>,
    dir: TempDir,
}

impl Rig {
    /// Starts the virtual robot (with its trace) and the guard on a new
    /// private folder and a free UDP port. The runtime is started with
    /// [`Rig::start_runtime`].
    pub fn start(bins: Bins) -> Result<Rig, String> {
        Rig::start_with(bins, true)
    }

    /// As [`Rig::start`], with the guard only when `guard` (the robots of
    /// the STOP ALL figure have none: their runtime reads the stop port).
    pub fn start_with(bins: Bins, guard: bool) -> Result<Rig, String> {
        let dir = TempDir::new()?;
        let d = dir.path().to_path_buf();
        let page_path = d.join("deathswitch");
        let page = Page::open(&page_path)
            .map_err(|e| format!("cannot create the page {}: {e}", page_path.display()))?;
        let sock = d.join("sim.sock");
        let mut cmd = Command::new(&bins.sim);
        cmd.arg("--socket")
            .arg(&sock)
            .arg("--trace")
            .arg(d.join("trace.jsonl"));
        // SAFETY: the closure runs in the forked child before exec and only
        // calls sched_setscheduler, an async-signal-safe system call, on a
        // valid sched_param on its stack.
        unsafe {
            cmd.pre_exec(|| {
                let p = libc::sched_param {
                    sched_priority: SIM_PRIORITY,
                };
                let _ = libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
                Ok(())
            });
        }
        let mut sim = spawn("nao-rs-sim", cmd, &d.join("sim.log"))?;
        let end = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            if !sim.alive() || Instant::now() > end {
                return Err(format!(
                    "nao-rs-sim did not listen on {} within 10 s:\n{}",
                    sock.display(),
                    sim.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let sim_fifo = policy(sim.pid(), None).is_some_and(|(p, _)| p == libc::SCHED_FIFO);
        let udp_port = free_udp_port()?;
        let mut rig = Rig {
            tail: Tail::new(d.join("trace.jsonl")),
            bins,
            udp_port,
            page,
            frames: Vec::new(),
            sim_fifo,
            runtime_starts: 0,
            runtime: None,
            guard: None,
            sim: Some(sim),
            dir,
        };
        if guard {
            rig.start_guard()?;
        }
        Ok(rig)
    }

    /// The private folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The page's path.
    pub fn page_path(&self) -> PathBuf {
        self.dir().join("deathswitch")
    }

    /// The sim's `--link` value.
    pub fn link_arg(&self) -> String {
        format!("sim:{}", self.dir().join("sim.sock").display())
    }

    /// The sim's control socket.
    pub fn ctl_path(&self) -> PathBuf {
        self.dir().join("sim.sock.ctl")
    }

    /// The runtime's wake socket.
    pub fn wake_path(&self) -> PathBuf {
        self.dir().join("wake.sock")
    }

    /// The runtime's status file.
    pub fn status_path(&self) -> PathBuf {
        self.dir().join("status.json")
    }

    fn start_guard(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bins.guard);
        cmd.arg("--page")
            .arg(self.page_path())
            .arg("--link")
            .arg(self.link_arg())
            .arg("--udp-port")
            .arg(self.udp_port.to_string())
            .env("NAO_RS_DEATHSWITCH", self.page_path());
        let mut g = spawn("nao-rs-guard", cmd, &self.dir().join("guard.log"))?;
        // The guard publishes itself in the page before it does anything else.
        let end = Instant::now() + Duration::from_secs(10);
        while self.page.snapshot().guard_pid != Some(g.pid() as u32) {
            if !g.alive() || Instant::now() > end {
                return Err(format!(
                    "nao-rs-guard did not publish itself in the page within 10 s:\n{}",
                    g.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // The UDP thread binds right after; give it a moment.
        std::thread::sleep(Duration::from_millis(100));
        self.guard = Some(g);
        Ok(())
    }

    /// The guard's pid.
    pub fn guard_pid(&self) -> i32 {
        self.guard.as_ref().map_or(0, Proc::pid)
    }

    /// The runtime's pid (0: none running).
    pub fn runtime_pid(&self) -> i32 {
        self.runtime.as_ref().map_or(0, Proc::pid)
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
                .map(Proc::log_tail)
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
        let mut cmd = Command::new(&self.bins.nao_rs);
        cmd.arg("run")
            .arg("--link")
            .arg(self.link_arg())
            .arg("--controller")
            .arg("stand")
            .arg("--udp-port")
            .arg(self.udp_port.to_string())
            .arg("--page")
            .arg(self.page_path())
            .arg("--wake-socket")
            .arg(self.wake_path())
            .arg("--status-file")
            .arg(self.status_path())
            .env("NAO_RS_DEATHSWITCH", self.page_path());
        let rt = spawn("nao-rs run", cmd, &self.dir().join("runtime.log"))?;
        let pid = rt.pid();
        self.runtime = Some(rt);
        self.runtime_starts += 1;
        Ok(pid)
    }

    /// The sim's board socket.
    pub fn sim_socket(&self) -> PathBuf {
        self.dir().join("sim.sock")
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

impl Drop for Rig {
    fn drop(&mut self) {
        // The runtime first, then the guard, then the sim; the folder last.
        self.runtime = None;
        self.guard = None;
        self.sim = None;
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
