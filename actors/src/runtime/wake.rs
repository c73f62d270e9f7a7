//! The wake socket: `nao-rs wake` asks a `stand` (or LoLA) controller to
//! leave its limp state after a re-arm. A Unix datagram socket, mode 0660,
//! group `hal` when that group exists; the datagram is the 4 bytes `wake`.
//!
//! Path: `$NAO_RS_WAKE_SOCKET`, else `wake.sock` next to the death switch
//! page (`/run/nao-rs/wake.sock` on the robot). A wake never re-arms: while
//! the switch is tripped it does nothing.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable naming the wake socket.
pub const ENV_WAKE_SOCKET: &str = "NAO_RS_WAKE_SOCKET";
/// The wake datagram.
pub const WAKE: &[u8] = b"wake";

/// The wake socket's path for a page at `page`.
pub fn default_path(page: &Path) -> PathBuf {
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
                "cannot wake through {}: {e}. Is `nao-rs run` running with a controller that \
                 wakes (stand, lola)? Set {ENV_WAKE_SOCKET} to its socket",
                path.display()
            ),
        )
    })
}

/// The listening side: sets `flag` for every wake datagram until dropped.
pub struct WakeListener {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WakeListener {
    /// Binds `path` (replacing a stale socket file), mode 0660, group `hal`
    /// if it exists, and starts the listener thread.
    pub fn start(path: &Path, flag: Arc<AtomicBool>) -> io::Result<WakeListener> {
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
                            flag.store(true, Ordering::Relaxed);
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
    fn nao_rs_wake_sets_the_wake_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wake.sock");
        let flag = Arc::new(AtomicBool::new(false));
        let l = WakeListener::start(&path, flag.clone()).unwrap();
        send(&path).unwrap();
        for _ in 0..100 {
            if flag.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(flag.load(Ordering::Relaxed));
        drop(l);
        assert!(!path.exists(), "the socket file is removed");
        let e = send(&path).unwrap_err();
        assert!(e.to_string().contains("NAO_RS_WAKE_SOCKET"), "{e}");
    }
}
