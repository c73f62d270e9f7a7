//! The thin I/O around [`Device`]: the USB socket (one thread per
//! connection), the control socket and the trace file.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nao_wire::link::{codec, Call};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::time::{clock_gettime, ClockId};

use crate::ctl::CtlCommand;
use crate::device::{Conn, Device, Outcome, Reply};
use crate::trace::TraceWriter;

/// Where the simulator listens and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPaths {
    /// The USB socket (`--socket`).
    pub socket: PathBuf,
    /// The control socket (`--ctl`, default socket + `.ctl`).
    pub ctl: PathBuf,
    /// The trace file (`--trace`).
    pub trace: Option<PathBuf>,
    /// Print nothing at start (`--quiet`).
    pub quiet: bool,
}

/// CLOCK_MONOTONIC now, ns.
pub fn now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64,
        Err(_) => 0,
    }
}

/// The one body and its trace, shared by both front ends (the Unix socket
/// here, FunctionFS in [`crate::functionfs`]) and the control socket.
pub(crate) struct Shared {
    device: Mutex<Device>,
    trace: Mutex<Option<TraceWriter>>,
}

impl Shared {
    /// The body, with its trace file created at `trace`.
    pub(crate) fn new(device: Device, trace: Option<&Path>) -> io::Result<Arc<Shared>> {
        let trace = match trace {
            Some(p) => Some(TraceWriter::create(p)?),
            None => None,
        };
        Ok(Arc::new(Shared {
            device: Mutex::new(device),
            trace: Mutex::new(trace),
        }))
    }

    /// The device, locked.
    pub(crate) fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.device)
    }

    /// One request of the socket's wire encoding from `conn`, its reply
    /// appended to `out`; a valid frame is written to the trace.
    pub(crate) fn request(&self, conn: &mut Conn, req: &[u8], out: &mut Vec<u8>) -> Outcome {
        let outcome = lock(&self.device).request(conn, req, now_ns(), out);
        self.trace(outcome);
        outcome
    }

    /// One USB call from `conn` (the FunctionFS front end's), the bytes an
    /// IN call read put in `answer`; a valid frame is written to the trace.
    pub(crate) fn call(&self, conn: &mut Conn, call: &Call<'_>, answer: &mut Vec<u8>) -> Reply {
        let (reply, outcome) = lock(&self.device).call(conn, call, now_ns(), answer);
        self.trace(outcome);
        reply
    }

    fn trace(&self, outcome: Outcome) {
        if let Some(f) = outcome.frame {
            if let Some(t) = lock(&self.trace).as_mut() {
                if let Err(e) = t.write(&f) {
                    eprintln!("nao-rs-sim: trace write failed: {e}");
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Binds `path` as a Unix socket, first removing a stale socket file there
/// (never any other kind of file).
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        } else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; choose another --socket/--ctl path",
                    path.display()
                ),
            ));
        }
    }
    UnixListener::bind(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    })
}

/// Runs the simulator: opens the trace, binds the control socket, then the
/// USB socket (so once the USB socket exists, everything is ready), and
/// serves until the process ends.
pub fn serve(device: Device, paths: &ServerPaths) -> io::Result<()> {
    let shared = Shared::new(device, paths.trace.as_deref())?;
    let ctl = bind(&paths.ctl)?;
    let usb = bind(&paths.socket)?;
    if !paths.quiet {
        eprintln!(
            "nao-rs-sim: listening on {} (control {}{})",
            paths.socket.display(),
            paths.ctl.display(),
            paths
                .trace
                .as_ref()
                .map(|t| format!(", trace {}", t.display()))
                .unwrap_or_default()
        );
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sim-ctl".into())
            .spawn(move || serve_ctl(ctl, &shared))?;
    }
    let mut next_id = 1u64;
    for stream in usb.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "nao-rs-sim: accept on {} failed: {e}",
                    paths.socket.display()
                );
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("sim-conn-{id}"))
            .spawn(move || serve_conn(stream, id, &shared))?;
    }
    Ok(())
}

fn serve_conn(mut stream: UnixStream, id: u64, shared: &Shared) {
    let pid = getsockopt(&stream, PeerCredentials)
        .map(|c| c.pid())
        .unwrap_or(0);
    let mut conn = Conn::new(id, pid);
    lock(&shared.device).connected();
    let mut req = Vec::with_capacity(2048);
    let mut out = Vec::with_capacity(2048);
    loop {
        if let Err(e) = codec::read_message(&mut stream, &mut req, "request") {
            if e.kind() == io::ErrorKind::InvalidData {
                eprintln!("nao-rs-sim: connection {id} (pid {pid}) sent a {e}; closing it");
            }
            break;
        }
        out.clear();
        let mut outcome = Outcome::default();
        codec::message(&mut out, |b| outcome = shared.request(&mut conn, &req, b));
        if outcome.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(outcome.delay_ms));
        }
        if stream.write_all(&out).is_err() {
            break;
        }
    }
    lock(&shared.device).disconnected(&mut conn);
}

/// Serves the control socket (one command line per connection).
pub(crate) fn serve_ctl(listener: UnixListener, shared: &Shared) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let answer = match CtlCommand::parse_line(&line) {
            Ok(cmd) => lock(&shared.device).control(cmd, now_ns()),
            Err(e) => format!("error: {e}"),
        };
        let mut w = &stream;
        let _ = w
            .write_all(answer.as_bytes())
            .and_then(|()| w.write_all(b"\n"));
    }
}
