//! Logging without logging on the 2 ms path: the loop pushes small `Copy`
//! events into a preallocated `rtrb` ring; a logging thread at normal
//! priority formats them with `slog`. The same event repeated back to back
//! is counted and printed once with its count, not repeated.
//!
//! A full ring drops the event and counts it (the loop never waits).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use deathswitch::Reason;

/// Why a chest board call failed, without the message (which allocates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// Transfer timed out.
    Timeout,
    /// Endpoint stalled.
    Pipe,
    /// No chest board (or the virtual robot's socket is missing).
    NoDevice,
    /// Another process holds interface 0.
    Busy,
    /// Anything else.
    Other,
}

impl From<&nao_wire::LinkError> for LinkFault {
    fn from(e: &nao_wire::LinkError) -> LinkFault {
        use nao_wire::LinkError as E;
        match e {
            E::Timeout => LinkFault::Timeout,
            E::Pipe => LinkFault::Pipe,
            E::NoDevice => LinkFault::NoDevice,
            E::Busy => LinkFault::Busy,
            E::Mismatch(_) | E::Other(_) => LinkFault::Other,
        }
    }
}

/// What the result of `kill(pid, SIGKILL)` was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillOutcome {
    /// Signal sent.
    Sent,
    /// No such process (it had died already).
    Gone,
    /// EPERM: a process of another user; it counts as alive.
    NotPermitted,
    /// Another errno.
    Failed(i32),
}

/// One thing worth a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The guard runs: its pid, poll period and rules.
    Started {
        /// The guard's pid.
        pid: u32,
        /// Beat timeout, ms.
        beat_timeout_ms: u64,
        /// Confirmation window, ms.
        confirm_window_ms: u64,
    },
    /// A runtime beat for the first time: watching it.
    Watching {
        /// The registered driver, if any.
        pid: Option<u32>,
    },
    /// The heartbeat vanished while watching (page cleared or replaced).
    Unwatched,
    /// Take-over: reason, the driver, what the kill did.
    TookOver {
        /// The reason tripped.
        reason: Reason,
        /// The driver killed.
        pid: Option<u32>,
        /// The kill's outcome (None: no driver to kill).
        kill: Option<KillOutcome>,
        /// How old the last beat was, ms.
        beat_age_ms: Option<u64>,
    },
    /// The board is open: the guard sends all-off frames.
    BoardOpened,
    /// Opening the board failed (retried every poll).
    BoardOpenFailed(LinkFault),
    /// An all-off frame exchange failed.
    FrameFailed(LinkFault),
    /// A new runtime registered: the board is handed over.
    HandedOver {
        /// The new runtime's pid.
        pid: u32,
    },
    /// A re-arm with no runtime running: the board is released.
    Released,
    /// `Page::check` repaired the page (magic gone): tripped page-lost.
    PageRepaired,
    /// `Page::check` found the path replaced or deleted: tripped page-lost.
    PageReplaced,
    /// The UDP stop port is bound.
    UdpBound {
        /// The port.
        port: u16,
    },
    /// Binding the UDP port failed (retried every second).
    UdpBindFailed {
        /// The port.
        port: u16,
        /// The errno.
        errno: i32,
    },
    /// A UDP stop datagram tripped the switch.
    UdpStop {
        /// True when this datagram tripped it (false: already tripped).
        tripped: bool,
    },
    /// The guard stops (SIGTERM / SIGINT).
    Stopping,
    /// The UDP listener panicked (tripped `fault`).
    UdpPanicked,
    /// A runtime registered: the guard holds its pidfd.
    Registered {
        /// The runtime's pid.
        pid: u32,
    },
    /// `pidfd_open` failed (not ESRCH): the guard watches by pid alone.
    PidfdFailed {
        /// The runtime's pid.
        pid: u32,
        /// The errno.
        errno: i32,
    },
}

/// The sending end, owned by one thread. Never blocks, never allocates.
pub struct LogSender {
    tx: rtrb::Producer<Event>,
    dropped: Arc<AtomicU64>,
}

impl LogSender {
    /// Push an event; a full ring drops it (counted, reported later).
    pub fn send(&mut self, e: Event) {
        if self.tx.push(e).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The logging thread's receiving side: one ring per sending thread.
pub struct LogHub {
    rings: Vec<rtrb::Consumer<Event>>,
    dropped: Arc<AtomicU64>,
}

/// Ring capacity per sender.
pub const RING_CAPACITY: usize = 1024;

impl LogHub {
    /// An empty hub.
    pub fn new() -> LogHub {
        LogHub {
            rings: Vec::new(),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A new sender with its own preallocated ring.
    pub fn sender(&mut self) -> LogSender {
        let (tx, rx) = rtrb::RingBuffer::new(RING_CAPACITY);
        self.rings.push(rx);
        LogSender {
            tx,
            dropped: self.dropped.clone(),
        }
    }

    /// Start the logging thread, printing through `logger` until `stop`.
    pub fn spawn(
        mut self,
        logger: slog::Logger,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> JoinHandle<()> {
        std::thread::Builder::new()
            .name("guard-log".into())
            .spawn(move || {
                let mut last: Option<(Event, u64)> = None;
                let mut dropped_seen = 0;
                loop {
                    let stopping = stop.load(Ordering::Acquire);
                    let mut got = false;
                    for ring in &mut self.rings {
                        while let Ok(e) = ring.pop() {
                            got = true;
                            match &mut last {
                                Some((l, n)) if *l == e => *n += 1,
                                _ => {
                                    if let Some((l, n)) = last.take() {
                                        if n > 1 {
                                            slog::info!(logger, "(the event before repeated {} times in all)", n; "event" => format!("{l:?}"));
                                        }
                                    }
                                    write(&logger, &e);
                                    last = Some((e, 1));
                                }
                            }
                        }
                    }
                    let dropped = self.dropped.load(Ordering::Relaxed);
                    if dropped != dropped_seen {
                        slog::warn!(logger, "log ring full: {} events dropped", dropped - dropped_seen);
                        dropped_seen = dropped;
                    }
                    if stopping && !got {
                        if let Some((l, n)) = last.take() {
                            if n > 1 {
                                slog::info!(logger, "(the event before repeated {} times in all)", n; "event" => format!("{l:?}"));
                            }
                        }
                        break;
                    }
                    if !got {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
            .expect("spawn the logging thread")
    }
}

impl Default for LogHub {
    fn default() -> Self {
        LogHub::new()
    }
}

fn write(log: &slog::Logger, e: &Event) {
    use slog::{error, info, warn};
    match *e {
        Event::Started { pid, beat_timeout_ms, confirm_window_ms } => {
            info!(log, "guard started"; "pid" => pid, "poll_ms" => 2, "beat_timeout_ms" => beat_timeout_ms, "confirm_window_ms" => confirm_window_ms)
        }
        Event::Watching { pid } => info!(log, "watching the runtime"; "driver_pid" => format!("{pid:?}")),
        Event::Unwatched => info!(log, "the heartbeat was cleared: idle"),
        Event::TookOver { reason, pid, kill, beat_age_ms } => error!(log, "TAKE-OVER";
            "reason" => reason.name(), "driver_pid" => format!("{pid:?}"), "kill" => format!("{kill:?}"), "beat_age_ms" => format!("{beat_age_ms:?}")),
        Event::BoardOpened => info!(log, "chest board opened: sending all-off every 12 ms"),
        Event::BoardOpenFailed(f) => warn!(log, "opening the chest board failed, retrying every 2 ms"; "error" => format!("{f:?}")),
        Event::FrameFailed(f) => warn!(log, "all-off frame exchange failed"; "error" => format!("{f:?}")),
        Event::HandedOver { pid } => info!(log, "a restarted runtime registered: chest board handed over, switch stays tripped"; "driver_pid" => pid),
        Event::Released => info!(log, "re-armed with no runtime running: chest board released, driver fields cleared"),
        Event::PageRepaired => error!(log, "PageRepaired: the page had lost its magic; made whole, tripped page-lost"),
        Event::PageReplaced => error!(log, "PageReplaced: the page file was replaced or deleted; now mapped to the page at the path, tripped page-lost"),
        Event::UdpBound { port } => info!(log, "UDP stop listening"; "port" => port),
        Event::UdpBindFailed { port, errno } => warn!(log, "cannot bind or share the UDP stop port, retrying every 50 ms";
            "port" => port, "error" => format!("{}", nix::errno::Errno::from_raw(errno))),
        Event::UdpStop { tripped } => error!(log, "UDP stop received"; "tripped_now" => tripped),
        Event::UdpPanicked => error!(log, "the UDP listener panicked: tripped fault; the runtime's listener still reads the port"),
        Event::Stopping => info!(log, "guard stopping"),
        Event::Registered { pid } => info!(log, "runtime registered: holding its pidfd"; "driver_pid" => pid),
        Event::PidfdFailed { pid, errno } => warn!(log, "cannot open the runtime's pidfd (needs Linux 5.3): watching it by pid alone";
            "driver_pid" => pid, "error" => format!("{}", nix::errno::Errno::from_raw(errno))),
    }
}

/// A terminal logger on stderr (systemd's journal takes stderr).
pub fn stderr_logger() -> slog::Logger {
    use slog::Drain;
    let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    slog::Logger::root(drain, slog::o!("prog" => "nao-rs-guard"))
}
