//! [`Proc`]: a child process of a test or of the bench, killed and reaped
//! when it goes out of scope, also when the test fails, and killed by the
//! kernel when the thread that started it dies.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// A child process, killed (SIGCONT, then SIGKILL) and reaped on drop,
/// also when the test fails. It gets SIGKILL from the kernel when the
/// thread that started it dies (`PR_SET_PDEATHSIG`), so none outlives a
/// killed test or bench. It derefs to its [`Child`].
pub struct Proc {
    name: String,
    child: Child,
    log: Option<PathBuf>,
}

impl Proc {
    /// Starts `cmd` with stdin from /dev/null; panics naming `name` when it
    /// cannot start.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        Proc::try_spawn(name, cmd, None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Proc::spawn`], its stdout and stderr appended to the file `log`.
    pub fn spawn_logged(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        Proc::try_spawn(name, cmd, Some(log)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `cmd` with stdin from /dev/null and, given a `log`, its
    /// stdout and stderr appended to that file, under the kernel floor
    /// when the test asks for it ([`crate::KERNEL_FLOOR_ENV`]); the error
    /// names `name`, the program and the cause.
    pub fn try_spawn(name: &str, cmd: &mut Command, log: Option<&Path>) -> Result<Proc, String> {
        if let Some(log) = log {
            let open = || {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .map_err(|e| format!("cannot open the log {}: {e}", log.display()))
            };
            cmd.stdout(open()?).stderr(open()?);
        }
        cmd.stdin(Stdio::null());
        // SAFETY: runs in the forked child before exec and only calls
        // prctl, an async-signal-safe system call, with constant arguments.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        crate::floor::as_requested(cmd);
        let child = cmd.spawn().map_err(|e| {
            format!(
                "cannot start {name} ({}): {e}",
                cmd.get_program().to_string_lossy()
            )
        })?;
        Ok(Proc {
            name: name.to_string(),
            child,
            log: log.map(Path::to_path_buf),
        })
    }

    /// The name it was started with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig`; panics when it cannot be sent.
    pub fn signal(&self, sig: Signal) {
        self.try_signal(sig).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sends `sig`; the error names the process.
    pub fn try_signal(&self, sig: Signal) -> Result<(), String> {
        signal::kill(Pid::from_raw(self.pid() as i32), sig).map_err(|e| {
            format!(
                "cannot send {sig} to {} (pid {}): {e}",
                self.name,
                self.pid()
            )
        })
    }

    /// Waits up to `timeout` for it to exit; its status, `None` on time-out.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = &mut self.child;
        crate::poll_every(timeout, Duration::from_millis(1), || {
            child.try_wait().ok().flatten()
        })
    }

    /// True while it has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far ("" when it has none or it cannot be read).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// The last `n` lines of its log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl From<Child> for Proc {
    fn from(child: Child) -> Proc {
        Proc {
            name: "child".to_string(),
            child,
            log: None,
        }
    }
}

impl std::ops::Deref for Proc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Not once it was reaped: its pid may be another process's by now.
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            // SIGCONT first: a stopped process is then killed at once.
            let _ = signal::kill(Pid::from_raw(self.pid() as i32), Signal::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
