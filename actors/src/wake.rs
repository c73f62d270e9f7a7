//! The wake: a person's "the robot may move again" after a re-arm (and
//! after every start of the runtime).
//!
//! A wake carries the page's **wake generation** its sender read (a mix
//! of the last re-arm's random nonce and the runtime's, while armed:
//! `deathswitch::Snapshot::wake_generation`); [`WakeSignal`] carries it to
//! the runtime's cycle, where the gate (`nao_wire::protocol::gate`) counts
//! it only if the page reads exactly that generation when the cycle reads
//! it. A wake read, guessed or recorded before the re-arm or before this
//! runtime's start carries another value and is used up; no clock is
//! compared. It is set by
//! the wake socket (`nao-rs wake`) and by [`super::Handle::wake`]; no
//! controller wakes the robot.
//!
//! The wake socket: a Unix datagram socket, mode 0660 whatever the umask
//! (bound in a private directory and renamed into place:
//! `super::socket_file`), group `hal` when that group exists. The
//! datagram is `wake <generation>`, the generation in ASCII decimal
//! (`datagram`, `parse`); anything else (a bare `wake` of an older
//! `nao-rs wake` included) is refused and logged. Path:
//! `$NAO_RS_WAKE_SOCKET`, else `wake.sock` next to the death switch page
//! (`/run/nao-rs/wake.sock` on the robot). A wake never re-arms.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nao_kit::clock::{Clock, MonotonicClock};

use super::socket_file;

/// The environment variable naming the wake socket.
pub(crate) const ENV_WAKE_SOCKET: &str = "NAO_RS_WAKE_SOCKET";
/// The wake datagram's first word.
pub(crate) const WAKE: &[u8] = b"wake";
/// The longest wake datagram: `wake ` and 20 digits.
pub(crate) const MAX_LEN: usize = 25;
/// Refused wake datagrams are logged at most this often, ns.
const REFUSAL_LOG_NS: u64 = 1_000_000_000;

/// The newest wake's generation, from a person's tool to the cycle. Never
/// blocks, never allocates.
#[derive(Debug, Default)]
pub struct WakeSignal {
    /// The generation of the newest wake not yet taken (0: none; no page
    /// has generation 0).
    generation: AtomicU64,
}

impl WakeSignal {
    /// A wake in `generation` (the page's wake generation its sender
    /// read). Of several wakes before the cycle takes one, the newest is
    /// kept (generations are random: no order among them); it is used up
    /// at the cycle's next read whatever it carries. A wake in generation 0
    /// (no page's) is nothing.
    pub(crate) fn wake(&self, generation: u64) {
        // Relaxed: the number itself is the whole message.
        self.generation.swap(generation, Ordering::Relaxed);
    }

    /// Takes the newest wake since the last call (the cycle's side): its
    /// generation.
    pub(crate) fn take(&self) -> Option<u64> {
        // Relaxed: as in `wake`.
        match self.generation.swap(0, Ordering::Relaxed) {
            0 => None,
            g => Some(g),
        }
    }
}

/// Why a datagram on the wake socket is not a wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotAWake {
    /// `wake` without a generation (an `nao-rs wake` older than wake
    /// generations).
    NoGeneration,
    /// Anything else.
    Malformed,
}

impl std::fmt::Display for NotAWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotAWake::NoGeneration => {
                "a wake without a generation (an older `nao-rs wake`?): refused; \
                 use `nao-rs wake` of this version, which reads the page's generation"
            }
            NotAWake::Malformed => "not a wake datagram (`wake <generation>`): refused",
        })
    }
}

/// A wake refused before it was sent: the switch is tripped (or the
/// page lost), so there is no armed generation to wake in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeRefused {
    /// The reason stored in the page (`None`: read as armed at one look
    /// and tripped at the next, or no reason readable).
    pub reason: Option<deathswitch::Reason>,
}

impl std::fmt::Display for WakeRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.reason.map_or("tripped", deathswitch::Reason::name);
        write!(
            f,
            "the switch is tripped ({r}); re-arm first with `naoctl rearm`, then wake"
        )
    }
}

impl std::error::Error for WakeRefused {}

/// The datagram of a wake in `generation`: `wake <generation>`.
pub(crate) fn datagram(generation: u64) -> String {
    format!("wake {generation}")
}

/// The generation of a wake datagram (pure): exactly `wake`, one space,
/// 1 to 20 ASCII digits that fit a u64, and nothing else (one trailing
/// newline is allowed).
pub(crate) fn parse(d: &[u8]) -> Result<u64, NotAWake> {
    let d = d.strip_suffix(b"\n").unwrap_or(d);
    if d == WAKE {
        return Err(NotAWake::NoGeneration);
    }
    let digits = d.strip_prefix(b"wake ").ok_or(NotAWake::Malformed)?;
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(NotAWake::Malformed);
    }
    let mut g: u64 = 0;
    for &c in digits {
        g = g
            .checked_mul(10)
            .and_then(|g| g.checked_add(u64::from(c - b'0')))
            .ok_or(NotAWake::Malformed)?;
    }
    Ok(g)
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

/// Sends a wake in `generation` to the socket at `path`.
///
/// # Errors
///
/// The datagram could not be sent (no socket at `path`: no runtime
/// serving it); the error names the path and the fix.
pub fn send(path: &Path, generation: u64) -> io::Result<()> {
    let s = UnixDatagram::unbound()?;
    s.send_to(datagram(generation).as_bytes(), path)
        .map(|_| ())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot wake through {}: {e}. Is `nao-rs run` running? Set \
                     {ENV_WAKE_SOCKET} to its wake socket (`--wake-socket`)",
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

/// A bound wake socket whose listener has not started yet
/// ([`WakeListener::bind`]); dropping it removes the socket file.
pub struct BoundWake {
    path: PathBuf,
    sock: Option<UnixDatagram>,
}

impl BoundWake {
    /// Starts the listener thread: a wake on `signal` for every wake
    /// datagram; refused datagrams are logged on `log` (at most one line a
    /// second, with a count).
    ///
    /// # Errors
    ///
    /// The socket's receive timeout could not be set or the thread could
    /// not be started.
    ///
    /// # Panics
    ///
    /// Never: a [`BoundWake`] holds its socket until it is started, once
    /// (`start` takes it by value).
    pub fn start(mut self, signal: Arc<WakeSignal>, log: slog::Logger) -> io::Result<WakeListener> {
        let sock = self.sock.take().expect("a bound wake socket starts once");
        let path = std::mem::take(&mut self.path);
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = nao_kit::actor::thread("nao-rs-wake").spawn(move || {
            let mut buf = [0u8; MAX_LEN + 2];
            let mut refused = 0u64;
            // Refusals are logged at most once a second of the real clock
            // (the socket's peers are processes on this machine).
            let mut logged_at: Option<u64> = None;
            // Acquire: pairs with the Release in Drop.
            while !s2.load(Ordering::Acquire) {
                let Ok(n) = sock.recv(&mut buf) else {
                    continue;
                };
                match parse(&buf[..n.min(buf.len())]) {
                    Ok(g) => {
                        signal.wake(g);
                        slog::info!(log, "wake received"; "generation" => g);
                    }
                    Err(why) => {
                        refused += 1;
                        let now = MonotonicClock.now_ns();
                        if logged_at.map_or(true, |t| now.saturating_sub(t) >= REFUSAL_LOG_NS) {
                            slog::warn!(log, "wake socket: {}", why;
                                    "refused_so_far" => refused);
                            logged_at = Some(now);
                        }
                    }
                }
            }
        })?;
        Ok(WakeListener {
            path,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for BoundWake {
    fn drop(&mut self) {
        if self.sock.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl WakeListener {
    /// Binds `path` (replacing a stale socket file of this user; a socket
    /// another process serves, another user's or a file that is not a
    /// socket is an error naming the path and the fix), mode 0660 whatever
    /// the umask, group `hal` if it exists. Start it with
    /// [`BoundWake::start`].
    ///
    /// # Errors
    ///
    /// The path is taken (as above) or the socket cannot be bound.
    pub fn bind(path: &Path) -> io::Result<BoundWake> {
        let sock = socket_file::bind_with_mode(
            path,
            socket_file::Kind::Datagram,
            "the wake socket",
            &format!("choose another path with --wake-socket or {ENV_WAKE_SOCKET}"),
            |p| UnixDatagram::bind(p),
        )?;
        Ok(BoundWake {
            path: path.to_path_buf(),
            sock: Some(sock),
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
    use std::os::unix::fs::MetadataExt;

    /// The newest wake is kept (never "the highest": generations are
    /// random) and taken once; a wake in generation 0 is nothing.
    #[test]
    fn the_newest_wake_is_kept_and_taken_once() {
        let s = WakeSignal::default();
        assert_eq!(s.take(), None);
        s.wake(5);
        s.wake(3);
        assert_eq!(s.take(), Some(3), "the newest, not the highest");
        assert_eq!(s.take(), None);
        s.wake(u64::MAX);
        s.wake(7);
        assert_eq!(s.take(), Some(7));
        s.wake(u64::MAX);
        assert_eq!(s.take(), Some(u64::MAX));
        s.wake(0);
        assert_eq!(s.take(), None, "no page has generation 0");
    }

    #[test]
    fn wake_datagrams_carry_a_decimal_generation_and_nothing_else() {
        let ok: [(&[u8], u64); 5] = [
            (b"wake 0", 0),
            (b"wake 7", 7),
            (b"wake 7\n", 7),
            (b"wake 007", 7),
            (b"wake 18446744073709551615", u64::MAX),
        ];
        for (d, g) in ok {
            assert_eq!(parse(d), Ok(g), "{:?}", String::from_utf8_lossy(d));
        }
        assert_eq!(parse(b"wake"), Err(NotAWake::NoGeneration));
        assert_eq!(parse(b"wake\n"), Err(NotAWake::NoGeneration));
        let bad: [&[u8]; 10] = [
            b"",
            b"wake ",
            b"wake  7",
            b"wake 7 ",
            b"wake -1",
            b"wake +1",
            b"wake 18446744073709551616",
            b"wake 1x",
            b"WAKE 1",
            b"wake 7\n\n",
        ];
        for d in bad {
            assert_eq!(
                parse(d),
                Err(NotAWake::Malformed),
                "{:?}",
                String::from_utf8_lossy(d)
            );
        }
        assert_eq!(parse(datagram(42).as_bytes()), Ok(42));
    }

    #[test]
    fn nao_rs_wake_sets_the_wake_generation_and_a_bare_wake_is_refused() {
        let dir = std::env::temp_dir().join(format!("nao-rs-wake-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wake.sock");
        let signal = Arc::new(WakeSignal::default());
        let log = slog::Logger::root(slog::Discard, slog::o!());
        let l = WakeListener::bind(&path)
            .unwrap()
            .start(signal.clone(), log)
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o660, "{mode:o}");
        let take = || {
            for _ in 0..100 {
                if let Some(g) = signal.take() {
                    return Some(g);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        };
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"wake", &path)
            .unwrap();
        send(&path, 9).unwrap();
        assert_eq!(take(), Some(9), "the bare wake did nothing, the 9 came");
        assert_eq!(signal.take(), None, "taken once");
        drop(l);
        assert!(!path.exists(), "the socket file is removed");
        let e = send(&path, 1).unwrap_err();
        assert!(e.to_string().contains("NAO_RS_WAKE_SOCKET"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
