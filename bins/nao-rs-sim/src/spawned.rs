//! [`Spawned`]: a test guard that starts `nao-rs-sim` on a private temp
//! socket, waits until it listens, and kills it on drop.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nao_wire::link::sim::SimLink;

use crate::trace::{self, Tail, TraceLine};

/// A running `nao-rs-sim` for a test: socket `sim.sock`, control socket
/// `sim.sock.ctl` and trace `trace.jsonl` in its own temp dir. Killed
/// (SIGKILL) and reaped on drop, also when the test panics.
///
/// ```no_run
/// let sim = nao_rs_sim::Spawned::start(testkit_bin_path(), &["--versions", "10"]).unwrap();
/// # fn testkit_bin_path() -> std::path::PathBuf { unimplemented!() }
/// // run a program with `--link` + sim.link_arg(), then:
/// sim.ctl("button").unwrap();
/// let frames = sim.trace().unwrap();
/// ```
pub struct Spawned {
    child: Reaped,
    dir: tempfile::TempDir,
    socket: PathBuf,
    ctl: PathBuf,
    trace: PathBuf,
}

impl Spawned {
    /// Starts the simulator binary `exe` (in tests: `testkit::bin("nao-rs-sim")`)
    /// with extra `args` (settings and start faults) and waits up to 10 s
    /// until its socket accepts connections.
    pub fn start(exe: impl AsRef<Path>, args: &[&str]) -> io::Result<Spawned> {
        let dir = tempfile::Builder::new().prefix("nao-rs-sim-").tempdir()?;
        let socket = dir.path().join("sim.sock");
        let ctl = dir.path().join("sim.sock.ctl");
        let trace = dir.path().join("trace.jsonl");
        let child = Command::new(exe.as_ref())
            .arg("--socket")
            .arg(&socket)
            .arg("--ctl")
            .arg(&ctl)
            .arg("--trace")
            .arg(&trace)
            .arg("--quiet")
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot start {}: {e}", exe.as_ref().display()),
                )
            })?;
        let mut s = Spawned {
            child: Reaped(child),
            dir,
            socket,
            ctl,
            trace,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if UnixStream::connect(&s.socket).is_ok() {
                return Ok(s);
            }
            if let Some(status) = s.child.0.try_wait()? {
                return Err(io::Error::other(format!(
                    "nao-rs-sim exited before listening ({status}); args {args:?}"
                )));
            }
            if Instant::now() > deadline {
                s.kill();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nao-rs-sim did not listen on {} within 10 s",
                        s.socket.display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The USB socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The `--link` value for programs: `sim:<socket>`.
    pub fn link_arg(&self) -> String {
        format!("sim:{}", self.socket.display())
    }

    /// A new (closed) [`SimLink`] to this simulator.
    pub fn link(&self) -> SimLink {
        SimLink::new(&self.socket)
    }

    /// The control socket path.
    pub fn ctl_path(&self) -> &Path {
        &self.ctl
    }

    /// The trace file path.
    pub fn trace_path(&self) -> &Path {
        &self.trace
    }

    /// The temp dir holding the sockets and the trace (a good place for the
    /// test's other files, e.g. the death switch page).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The simulator's pid.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Sends a control command (`"drop 11"`, `"button"`, `"heat 10"`, ...);
    /// the answer, or an error if the simulator refused it.
    pub fn ctl(&self, line: &str) -> io::Result<String> {
        let answer = crate::ctl::send(&self.ctl, line)?;
        if answer.starts_with("error") {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, answer));
        }
        Ok(answer)
    }

    /// The `status` JSON.
    pub fn status(&self) -> io::Result<serde_json::Value> {
        let s = self.ctl("status")?;
        serde_json::from_str(&s).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Every complete trace line so far.
    pub fn trace(&self) -> io::Result<Vec<TraceLine>> {
        trace::read(&self.trace)
    }

    /// Every complete trace line so far with the body's state (posture,
    /// bumpers, joint faults).
    pub fn records(&self) -> io::Result<Vec<trace::TraceRecord>> {
        trace::read_records(&self.trace)
    }

    /// A live follower of the trace from its start.
    pub fn tail(&self) -> Tail {
        Tail::new(&self.trace)
    }

    /// Kills (SIGKILL) and reaps the simulator now.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}

/// A child process killed (SIGKILL) and reaped on drop, also when a test
/// panics.
struct Reaped(Child);

impl Reaped {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A process holding the simulator's interface 0 (`nao-rs-sim hold`), for
/// busy and takeover tests: started and claimed in [`Holder::start`],
/// killed with SIGKILL (which releases the claim at once) by
/// [`Holder::kill`] or on drop.
pub struct Holder {
    child: Reaped,
}

impl Holder {
    /// Starts `exe hold --socket <sim's socket>` and waits (up to 10 s)
    /// until it has claimed the interface.
    pub fn start(exe: impl AsRef<Path>, sim: &Spawned) -> io::Result<Holder> {
        use std::io::BufRead;
        let child = Command::new(exe.as_ref())
            .arg("hold")
            .arg("--socket")
            .arg(sim.socket())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut holder = Holder {
            child: Reaped(child),
        };
        let Some(out) = holder.child.0.stdout.take() else {
            return Err(io::Error::other("no stdout of nao-rs-sim hold"));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let ok =
                io::BufReader::new(out).read_line(&mut line).is_ok() && line.starts_with("claimed");
            let _ = tx.send(ok);
        });
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(true) => Ok(holder),
            _ => {
                holder.kill();
                Err(io::Error::other(
                    "nao-rs-sim hold did not claim interface 0 (busy, or the simulator is gone)",
                ))
            }
        }
    }

    /// The holder's pid.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Kills the holder with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}
