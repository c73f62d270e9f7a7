//! [`Rig`]: the virtual robot on a private folder, and the guard and the
//! runtime started on it, for the integration tests and the bench. Only
//! through the programs' command lines and files: the page, the trace and
//! the logs are read by the caller (with `deathswitch` and `nao_rs_sim`).
//!
//! The folder holds the page `deathswitch` (unless another path is given),
//! the board `sim.sock` with its control socket `sim.sock.ctl`, the trace
//! `trace.jsonl`, and per program started with a name `NAME`: its log
//! `NAME.log` (stdout and stderr) and, for a runtime, its wake socket
//! `NAME.wake.sock`. Every command gets `NAO_RS_DEATHSWITCH` = the page.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::{poll_for, wait_for, Proc};

/// The guard's rule 2 (beat timeout) in the process-level tests, ms: the
/// robot's is 60 ms, and a shared 2-core host stalls a process for 60 ms
/// and more now and then, which the guard rightly takes for a hang. These
/// tests judge what only real processes show (signals, pidfds, sockets,
/// files), not the bounds: the 60 ms and 40 ms rules are judged in
/// virtual time by the world on every schedule (I3, `docs/world.md`),
/// by the guard's core tables, and measured by `nao-rs-bench` and the
/// virtual head with the robot's values (`docs/safety-rules.md`, "Tests
/// and time").
pub const TEST_BEAT_TIMEOUT_MS: u64 = 500;

/// The guard's rule 3 (confirmation window) in the process-level tests,
/// ms (the robot's: 40 ms); see [`TEST_BEAT_TIMEOUT_MS`].
pub const TEST_CONFIRM_WINDOW_MS: u64 = 300;

/// Where the programs come from.
#[derive(Debug, Clone)]
pub enum Programs {
    /// Built by cargo in the test's own profile when first asked for
    /// ([`crate::bin`]).
    Built,
    /// Already built, in this folder.
    In(PathBuf),
}

impl Programs {
    /// The program `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        match self {
            Programs::Built => crate::bin(name),
            Programs::In(dir) => dir.join(name),
        }
    }

    /// The programs in `dir`, or (`None`) next to this executable; an error
    /// naming the first of `needed` that is not there and the fix.
    pub fn find(dir: Option<&Path>, needed: &[&str]) -> Result<Programs, String> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find this program's path: {e}; give --bin-dir"))?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        for name in needed {
            let p = dir.join(name);
            if !p.exists() {
                return Err(format!(
                    "{} not found; build the workspace's programs (`cargo build --bins`) or give \
                     --bin-dir DIR with {}",
                    p.display(),
                    needed.join(", ")
                ));
            }
        }
        Ok(Programs::In(dir))
    }
}

/// How a [`Rig`] starts; [`RigSpec::default`] is the standard rig.
#[derive(Debug, Clone)]
pub struct RigSpec {
    /// The programs to run (default [`Programs::Built`]).
    pub programs: Programs,
    /// The simulator's settings and start faults (default `--versions 10`,
    /// the configuration version the runtime accepts).
    pub sim_args: Vec<String>,
    /// The simulator's SCHED_FIFO priority, where permitted (default none).
    pub sim_priority: Option<i32>,
    /// The page's path (default `deathswitch`); a relative path is in the
    /// rig's folder. Its folder is created if missing, the page is not.
    pub page: Option<PathBuf>,
    /// The guard's rule 2 and rule 3 bounds (default [`GuardBounds::Test`]).
    pub guard_bounds: GuardBounds,
}

/// The guard's rule 2 (beat timeout) and rule 3 (confirmation window)
/// bounds a [`Rig`] starts it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardBounds {
    /// The robot's own, the guard's defaults (60 ms, 40 ms): the bench
    /// measures them.
    Robot,
    /// [`TEST_BEAT_TIMEOUT_MS`] and [`TEST_CONFIRM_WINDOW_MS`]: the
    /// process-level tests, on a host that stalls.
    Test,
}

impl Default for RigSpec {
    fn default() -> RigSpec {
        RigSpec {
            programs: Programs::Built,
            sim_args: vec!["--versions".into(), "10".into()],
            sim_priority: None,
            page: None,
            guard_bounds: GuardBounds::Test,
        }
    }
}

impl RigSpec {
    /// Starts the simulator and waits (10 s at most) until its board
    /// socket accepts connections; panics with the reason.
    pub fn start(self) -> Rig {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`RigSpec::start`], the reason as an error.
    pub fn try_start(self) -> Result<Rig, String> {
        let dir = tempfile::Builder::new()
            .prefix("nao-rs-rig-")
            .tempdir()
            .map_err(|e| {
                format!(
                    "cannot create a private folder in {}: {e}; set TMPDIR to a writable folder",
                    std::env::temp_dir().display()
                )
            })?;
        let d = dir.path();
        let page = d.join(self.page.as_deref().unwrap_or(Path::new("deathswitch")));
        if let Some(folder) = page.parent() {
            std::fs::create_dir_all(folder).map_err(|e| {
                format!("cannot create the page's folder {}: {e}", folder.display())
            })?;
        }
        let sock = d.join("sim.sock");
        let mut cmd = Command::new(self.programs.path("nao-rs-sim"));
        cmd.arg("--socket")
            .arg(&sock)
            .arg("--ctl")
            .arg(d.join("sim.sock.ctl"))
            .arg("--trace")
            .arg(d.join("trace.jsonl"))
            .arg("--quiet")
            .args(&self.sim_args);
        if let Some(priority) = self.sim_priority {
            // SAFETY: runs in the forked child before exec and only calls
            // sched_setscheduler, an async-signal-safe system call, on a
            // sched_param on its own stack.
            unsafe {
                cmd.pre_exec(move || {
                    let p = libc::sched_param {
                        sched_priority: priority,
                    };
                    let _ = libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
                    Ok(())
                });
            }
        }
        let mut sim = Proc::try_spawn("nao-rs-sim", &mut cmd, Some(&d.join("sim.log")))?;
        let listening = poll_for(Duration::from_secs(10), || {
            if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                Some(Ok(()))
            } else if !sim.running() {
                Some(Err("exited"))
            } else {
                None
            }
        });
        if listening != Some(Ok(())) {
            return Err(format!(
                "nao-rs-sim {:?} did not listen on {} within 10 s ({}):\n{}",
                self.sim_args,
                sock.display(),
                listening.map_or("timed out", |r| r.err().unwrap_or("")),
                sim.log_tail(8)
            ));
        }
        Ok(Rig {
            sim,
            programs: self.programs,
            page,
            dir,
            guard_bounds: self.guard_bounds,
        })
    }
}

/// The virtual robot (`nao-rs-sim` with its trace) on a private folder,
/// killed and the folder removed on drop; the guard, the runtime and the
/// operator's tools started on it as [`Proc`]s (drop them before the rig).
pub struct Rig {
    sim: Proc,
    programs: Programs,
    page: PathBuf,
    dir: tempfile::TempDir,
    guard_bounds: GuardBounds,
}

/// How a runtime (`nao-rs run`) is started on a [`Rig`]: its name (its log
/// `NAME.log` and wake socket `NAME.wake.sock`), controller, UDP stop port,
/// priority, fault and further arguments.
#[derive(Debug, Clone)]
pub struct Runtime {
    name: String,
    controller: String,
    udp_port: Option<u16>,
    priority: Option<u32>,
    fault: Option<String>,
    args: Vec<OsString>,
}

impl Runtime {
    /// `nao-rs run --controller stand --no-udp` at the program's own priority.
    pub fn new(name: &str) -> Runtime {
        Runtime {
            name: name.to_string(),
            controller: "stand".to_string(),
            udp_port: None,
            priority: None,
            fault: None,
            args: Vec::new(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `--controller CONTROLLER`.
    pub fn controller(mut self, controller: &str) -> Runtime {
        self.controller = controller.to_string();
        self
    }

    /// `--udp-port PORT` instead of `--no-udp`.
    pub fn udp_port(mut self, port: u16) -> Runtime {
        self.udp_port = Some(port);
        self
    }

    /// `--priority PRIORITY` (0: the normal policy).
    pub fn priority(mut self, priority: u32) -> Runtime {
        self.priority = Some(priority);
        self
    }

    /// `--fault KIND` (a runtime built with the `fault-injection` feature).
    pub fn fault(mut self, kind: &str) -> Runtime {
        self.fault = Some(kind.to_string());
        self
    }

    /// One more argument, after the others.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Runtime {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// More arguments, after the others.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Runtime {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }
}

impl Rig {
    /// The standard rig: [`RigSpec::default`]`().start()`.
    pub fn start() -> Rig {
        RigSpec::default().start()
    }

    /// The private folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The page's path.
    pub fn page_path(&self) -> &Path {
        &self.page
    }

    /// The simulator's board socket.
    pub fn sim_socket(&self) -> PathBuf {
        self.dir().join("sim.sock")
    }

    /// The `--link` value of the simulator's board: `sim:PATH`.
    pub fn link_arg(&self) -> String {
        format!("sim:{}", self.sim_socket().display())
    }

    /// The simulator's control socket.
    pub fn ctl_path(&self) -> PathBuf {
        self.dir().join("sim.sock.ctl")
    }

    /// The simulator's trace (JSON lines, read with `nao_rs_sim::trace`).
    pub fn trace_path(&self) -> PathBuf {
        self.dir().join("trace.jsonl")
    }

    /// The simulator's process.
    pub fn sim(&mut self) -> &mut Proc {
        &mut self.sim
    }

    /// The simulator's pid.
    pub fn sim_pid(&self) -> u32 {
        self.sim.pid()
    }

    /// Where this rig's programs come from.
    pub fn programs(&self) -> &Programs {
        &self.programs
    }

    /// The program `name` of this rig.
    pub fn program(&self, name: &str) -> PathBuf {
        self.programs.path(name)
    }

    /// The log of the program started as `name`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.log"))
    }

    /// The log of the program started as `name` so far ("" if none).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// Waits up to `timeout` until the log of `name` contains `what`;
    /// panics with the log when it does not.
    pub fn wait_log(&self, name: &str, what: &str, timeout: Duration) {
        if poll_for(timeout, || self.log(name).contains(what).then_some(())).is_none() {
            panic!(
                "{name} did not log {what:?} within {timeout:?}:\n{}",
                self.log(name)
            );
        }
    }

    /// The wake socket of the runtime started as `name`.
    pub fn wake_socket(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.wake.sock"))
    }

    /// A command for the program `name` with `NAO_RS_DEATHSWITCH` set to
    /// the page.
    pub fn command(&self, name: &str) -> Command {
        let mut c = Command::new(self.program(name));
        c.env("NAO_RS_DEATHSWITCH", &self.page);
        c
    }

    /// `nao-rs-guard --page PAGE --link sim:... --udp-port PORT` (0: off)
    /// with the rig's [`GuardBounds`], not started.
    pub fn guard_command(&self, udp_port: u16) -> Command {
        let mut c = self.command("nao-rs-guard");
        c.arg("--page").arg(&self.page).args([
            "--link",
            &self.link_arg(),
            "--udp-port",
            &udp_port.to_string(),
        ]);
        if self.guard_bounds == GuardBounds::Test {
            c.args([
                "--beat-timeout-ms",
                &TEST_BEAT_TIMEOUT_MS.to_string(),
                "--confirm-window-ms",
                &TEST_CONFIRM_WINDOW_MS.to_string(),
            ]);
        }
        c
    }

    /// Starts the guard (log `guard.log`) and waits (10 s at most) until
    /// it has published itself in the page (it logs `guard started` with
    /// its pid once it has); panics with its log when it does not.
    pub fn start_guard(&self, udp_port: u16) -> Proc {
        self.try_start_guard(udp_port)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Rig::start_guard`], the reason as an error.
    pub fn try_start_guard(&self, udp_port: u16) -> Result<Proc, String> {
        let mut g = Proc::try_spawn(
            "nao-rs-guard",
            &mut self.guard_command(udp_port),
            Some(&self.log_path("guard")),
        )?;
        let started = format!("pid: {},", g.pid());
        let up = poll_for(Duration::from_secs(10), || {
            let log = g.log();
            if log
                .lines()
                .any(|l| l.contains("guard started") && l.contains(&started))
            {
                Some(true)
            } else {
                (!g.running()).then_some(false)
            }
        });
        if up != Some(true) {
            return Err(format!(
                "nao-rs-guard (pid {}) did not publish itself in the page within 10 s:\n{}",
                g.pid(),
                g.log_tail(8)
            ));
        }
        Ok(g)
    }

    /// `nao-rs run` as `rt` says, on this rig's board, page and wake
    /// socket, not started.
    pub fn runtime_command(&self, rt: &Runtime) -> Command {
        let mut c = self.command("nao-rs");
        c.args([
            "run",
            "--link",
            &self.link_arg(),
            "--controller",
            &rt.controller,
        ])
        .arg("--page")
        .arg(&self.page)
        .arg("--wake-socket")
        .arg(self.wake_socket(&rt.name));
        match rt.udp_port {
            Some(p) => c.args(["--udp-port", &p.to_string()]),
            None => c.arg("--no-udp"),
        };
        if let Some(p) = rt.priority {
            c.args(["--priority", &p.to_string()]);
        }
        if let Some(f) = &rt.fault {
            c.args(["--fault", f]);
        }
        c.args(&rt.args);
        c
    }

    /// Starts the runtime `rt` (log `NAME.log`); does not wait for it.
    pub fn start_runtime(&self, rt: &Runtime) -> Proc {
        self.try_start_runtime(rt).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Rig::start_runtime`], the reason as an error.
    pub fn try_start_runtime(&self, rt: &Runtime) -> Result<Proc, String> {
        Proc::try_spawn(
            "nao-rs run",
            &mut self.runtime_command(rt),
            Some(&self.log_path(&rt.name)),
        )
    }

    /// `nao-rs wake` for the runtime started as `name`, not run yet.
    pub fn wake_command(&self, name: &str) -> Command {
        let mut c = self.command("nao-rs");
        c.arg("wake")
            .arg("--socket")
            .arg(self.wake_socket(name))
            .arg("--page")
            .arg(&self.page);
        c
    }

    /// Runs `nao-rs wake` for the runtime started as `name`; its output.
    pub fn wake(&self, name: &str) -> Output {
        output(&mut self.wake_command(name))
    }

    /// Waits (15 s at most) for the wake socket of the runtime started as
    /// `name` and for its registration in the page (its log says "every
    /// start is limp" right after it registered: the wake generation is
    /// its own from then on, and the socket is bound a moment before),
    /// then wakes it; panics when either fails.
    pub fn wake_when_ready(&self, name: &str) {
        let socket = self.wake_socket(name);
        wait_for(
            &format!("the wake socket {}", socket.display()),
            Duration::from_secs(15),
            || socket.exists().then_some(()),
        );
        self.wait_log(name, "every start is limp", Duration::from_secs(15));
        ok(self.wake(name), "nao-rs wake");
    }

    /// Runs `nao-rs-sim ctl --socket SIM WORDS...` (a control command to
    /// the simulator: `button`, `drop 11`, ...); its output.
    pub fn sim_ctl(&self, words: &[&str]) -> Output {
        output(
            self.command("nao-rs-sim")
                .args(["ctl", "--socket"])
                .arg(self.sim_socket())
                .args(words),
        )
    }

    /// Runs `naoctl ARGS` on the page; its output.
    pub fn naoctl(&self, args: &[&str]) -> Output {
        output(self.command("naoctl").args(args))
    }
}

/// How long [`output`] lets a command run: a command that should have
/// exited (a refused start, a one-shot tool) and hangs fails the test.
pub const OUTPUT_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `cmd` (stdin from /dev/null) to its end, under the kernel floor
/// when the test asks for it ([`crate::KERNEL_FLOOR_ENV`]); its output. Panics when
/// it cannot start, or kills it and panics (with what it wrote) when it
/// runs past [`OUTPUT_DEADLINE`].
pub fn output(cmd: &mut Command) -> Output {
    use std::process::Stdio;
    let mut child = crate::floor::as_requested(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
    let read_all = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read_all(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read_all(child.stderr.take().map(|p| Box::new(p) as _));
    let status = poll_for(OUTPUT_DEADLINE, || child.try_wait().ok().flatten());
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        let err = stderr.join().unwrap_or_default();
        panic!(
            "{:?} still ran after {} s (killed); its stderr: {}",
            cmd.get_program(),
            OUTPUT_DEADLINE.as_secs(),
            String::from_utf8_lossy(&err)
        );
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// `cmd` run by `sh -c "PREFIX; exec PROGRAM ARGS..."` with `cmd`'s
/// environment: `PREFIX` changes the process (a umask, an environment
/// variable with the shell's pid) just before the program replaces it.
pub fn in_shell(prefix: &str, cmd: &Command) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("{prefix}; exec \"$0\" \"$@\""))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Asserts that `out` is a success, naming `what` with its stderr; `out`.
pub fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
