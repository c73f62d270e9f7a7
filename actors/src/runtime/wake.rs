//! The wake: a person's "the robot may move again" after a re-arm.
//!
//! [`WakeSignal`] carries the newest wake's time to the runtime's cycle,
//! where the latch ([`super::latch`]) decides whether it counts (only after
//! the re-arm; a wake while tripped is used up and does nothing). It is set
//! by the wake socket (`nao-rs wake`) and by [`super::Handle::wake`]; no
//! controller wakes the robot.
//!
//! The wake socket: a Unix datagram socket, mode 0660, group `hal` when
//! that group exists; the datagram is the 4 bytes `wake`. Path:
//! `$NAO_RS_WAKE_SOCKET`, else `wake.sock` next to the death switch page
//! (`/run/nao-rs/wake.sock` on the robot). A wake never re-arms.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable naming the wake socket.
pub const ENV_WAKE_SOCKET: &str = "NAO_RS_WAKE_SOCKET";
/// The wake datagram.
pub const WAKE: &[u8] = b"wake";

/// The newest wake's time, from a person's tool to the cycle. Never
/// blocks, never allocates.
#[derive(Debug, Default)]
pub struct WakeSignal {
    /// Monotonic ns of the newest wake not yet taken (0: none).
    at_ns: AtomicU64,
}

impl WakeSignal {
    /// A wake now.
    pub fn wake(&self) {
        self.wake_at(deathswitch::unix_now_ns().max(1));
    }

    /// A wake at `t_ns` (ns since the Unix epoch, the clock of the page's
    /// re-arm time; 0 is raised to 1). The newest wins.
    pub fn wake_at(&self, t_ns: u64) {
        // Relaxed: the time itself is the whole message.
        self.at_ns.fetch_max(t_ns.max(1), Ordering::Relaxed);
    }

    /// Takes the newest wake since the last call (the cycle's side).
    pub fn take(&self) -> Option<u64> {
        // Relaxed: as in `wake_at`.
        match self.at_ns.swap(0, Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        }
    }
}

/// The wake socket's path for a page at `page`.
pub fn socket_path(page: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os(ENV_WAKE_SOCKET) {
        return PathBuf::from(p);
    }
    page.parent()
        .unwrap_or(Path::new("/run/nao-rs"))
        .join("wake.sock")
}

/// Sends a wake to the socket at `path`.
pub fn send(path: &Path) -> io::Result<()> {
    let s = UnixDatagram::unbound()?;
    s.send_to(WAKE, path).map(|_| ()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot wake through {}: {e}. Is `nao-rs run` running? Set {ENV_WAKE_SOCKET} \
                 to its wake socket (`--wake-socket`)",
                path.display()
            ),
        )
    })
}

/// The listening side: a wake on `signal` for every wake datagram, until
/// dropped.
pub struct WakeListener {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WakeListener {
    /// Binds `path` (replacing a stale socket file), mode 0660, group `hal`
    /// if it exists, and starts the listener thread.
    pub fn start(path: &Path, signal: Arc<WakeSignal>) -> io::Result<WakeListener> {
        if let Ok(md) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if md.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let sock = UnixDatagram::bind(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind the wake socket {}: {e}", path.display()),
            )
        })?;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660));
        if let Ok(Some(g)) = nix::unistd::Group::from_name("hal") {
            let _ = nix::unistd::chown(path, None, Some(g.gid));
        }
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nao-rs-wake".into())
            .spawn(move || {
                let mut buf = [0u8; 16];
                // Acquire: pairs with the Release in Drop.
                while !s2.load(Ordering::Acquire) {
                    if let Ok(n) = sock.recv(&mut buf) {
                        if &buf[..n] == WAKE {
                            signal.wake();
                        }
                    }
                }
            })?;
        Ok(WakeListener {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for WakeListener {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in the thread. The thread ends
        // within its 200 ms receive timeout; it is not waited for, so a
        // stopping runtime exits at once.
        self.stop.store(true, Ordering::Release);
        drop(self.thread.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_wake_wins_and_is_taken_once() {
        let s = WakeSignal::default();
        assert_eq!(s.take(), None);
        s.wake_at(5);
        s.wake_at(3);
        assert_eq!(s.take(), Some(5));
        assert_eq!(s.take(), None);
        s.wake_at(0);
        assert_eq!(s.take(), Some(1));
    }

    #[test]
    fn nao_rs_wake_sets_the_wake_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wake.sock");
        let signal = Arc::new(WakeSignal::default());
        let l = WakeListener::start(&path, signal.clone()).unwrap();
        let before = deathswitch::unix_now_ns();
        send(&path).unwrap();
        let mut woken = None;
        for _ in 0..100 {
            woken = signal.take();
            if woken.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(woken.is_some_and(|t| t >= before), "{woken:?}");
        assert_eq!(signal.take(), None, "taken once");
        drop(l);
        assert!(!path.exists(), "the socket file is removed");
        let e = send(&path).unwrap_err();
        assert!(e.to_string().contains("NAO_RS_WAKE_SOCKET"), "{e}");
    }
}
