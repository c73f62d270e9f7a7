//! The guard's log events, written through the actor kit's logging actor
//! (`nao_kit::log`: a preallocated ring per actor, a logging actor
//! at normal priority, repeats counted), the same as the runtime's. This
//! module only names the guard's events and turns each into the kit's
//! `Copy` events (a fixed text and a number): [`emit`]. Never blocks, never
//! allocates.

use deathswitch::Reason;
use nao_kit::log::{EventSink, Level, Logbook};

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
    /// The guard is out of file descriptors (EMFILE): not even its reserve
    /// could be taken back after the attempt.
    NoFds,
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
            E::Mismatch | E::Other => LinkFault::Other,
        }
    }
}

/// What the result of SIGKILL was.
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
    /// Not signalled: not the runtime verified at its registration.
    NotVerified,
}

/// One thing worth a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardEvent {
    /// A runtime beat for the first time: watching it.
    Watching {
        /// The registered driver, if any.
        pid: Option<u32>,
    },
    /// The heartbeat vanished while watching (page cleared or replaced).
    Unwatched,
    /// Take-over: reason, the runtime, what the kill did.
    TookOver {
        /// The reason tripped.
        reason: Reason,
        /// The runtime taken over from.
        pid: Option<u32>,
        /// The kill's outcome (None: nothing to kill).
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
    /// The UDP stop port's socket is held (bound, or shared by the runtime).
    UdpBound {
        /// The port.
        port: u16,
    },
    /// Neither bind nor hand-over worked (retried every 50 ms).
    UdpBindFailed {
        /// The port.
        port: u16,
        /// The errno.
        errno: i32,
    },
    /// A UDP stop datagram.
    UdpStop {
        /// True when this datagram tripped it (false: already tripped).
        tripped: bool,
    },
    /// The UDP listener panicked (tripped `fault`).
    UdpPanicked,
    /// The guard stops (SIGTERM / SIGINT).
    Stopping,
    /// A runtime registered: the guard holds its pidfd.
    Registered {
        /// The runtime's pid.
        pid: u32,
    },
    /// The page named a process that is not the runtime that registered
    /// (gone, a reused pid, or a process not restarted since the take-over
    /// while the guard holds the board): cleared from the page.
    Refused {
        /// The pid in the page.
        pid: u32,
    },
    /// `pidfd_open` failed (not ESRCH): the guard watches by pid alone.
    PidfdFailed {
        /// The runtime's pid.
        pid: u32,
        /// The errno.
        errno: i32,
    },
    /// The held runtime's exit-watch connection is bound: its exit is
    /// seen at once without a pidfd as well.
    ExitWatchBound {
        /// The runtime's pid (the kernel's stamp on its answer).
        pid: u32,
    },
    /// Accepting an exit-watch connection failed (retried every poll).
    ExitWatchAcceptFailed {
        /// The errno (EMFILE: out of descriptors).
        errno: i32,
    },
}

fn pid_value(pid: Option<u32>) -> i64 {
    pid.map_or(-1, i64::from)
}

fn take_over_text(reason: Reason) -> &'static str {
    match reason {
        Reason::GuardHeartbeatLost => "TAKE-OVER guard-heartbeat-lost (runtime pid)",
        Reason::GuardNoConfirmation => "TAKE-OVER guard-no-confirmation (runtime pid)",
        Reason::GuardRuntimeExited => "TAKE-OVER guard-runtime-exited (runtime pid)",
        Reason::GuardStartUpTimeout => "TAKE-OVER guard-start-up-timeout: no first beat within the start-up or hand-over bound (runtime pid)",
        _ => "TAKE-OVER (runtime pid)",
    }
}

fn fault_text(open: bool, f: LinkFault) -> &'static str {
    match (open, f) {
        (true, LinkFault::Timeout) => {
            "opening the chest board failed: timeout; retrying every 2 ms"
        }
        (true, LinkFault::Pipe) => "opening the chest board failed: stall; retrying every 2 ms",
        (true, LinkFault::NoDevice) => {
            "opening the chest board failed: no device; retrying every 2 ms"
        }
        (true, LinkFault::Busy) => "opening the chest board failed: busy; retrying every 2 ms",
        (true, LinkFault::Other) => "opening the chest board failed; retrying every 2 ms",
        (true, LinkFault::NoFds) => {
            "opening the chest board failed: out of file descriptors (EMFILE; raise LimitNOFILE); retrying every 2 ms"
        }
        (false, LinkFault::NoFds) => "all-off frame exchange failed: out of file descriptors (EMFILE)",
        (false, LinkFault::Timeout) => "all-off frame exchange failed: timeout",
        (false, LinkFault::Pipe) => "all-off frame exchange failed: stall",
        (false, LinkFault::NoDevice) => "all-off frame exchange failed: no device",
        (false, LinkFault::Busy) => "all-off frame exchange failed: busy",
        (false, LinkFault::Other) => "all-off frame exchange failed",
    }
}

/// Pushes `e` into `sink` as the kit's events (one or, for a take-over,
/// up to three). Never blocks or allocates.
pub fn emit(sink: &mut EventSink, e: GuardEvent) {
    use Level::{Error, Info, Warning};
    match e {
        GuardEvent::Watching { pid } => sink.emit(Info, "watching the runtime (driver pid)", pid_value(pid)),
        GuardEvent::Unwatched => sink.emit(Info, "the heartbeat was cleared: idle", 0),
        GuardEvent::TookOver {
            reason,
            pid,
            kill,
            beat_age_ms,
        } => {
            sink.emit(Error, take_over_text(reason), pid_value(pid));
            match kill {
                None => {}
                Some(KillOutcome::Sent) => sink.emit(Error, "take-over: SIGKILL sent through the pidfd (pid)", pid_value(pid)),
                Some(KillOutcome::Gone) => sink.emit(Warning, "take-over: the runtime was gone already (pid)", pid_value(pid)),
                Some(KillOutcome::NotPermitted) => sink.emit(Error, "take-over: SIGKILL not permitted (EPERM) (pid)", pid_value(pid)),
                Some(KillOutcome::Failed(errno)) => sink.emit(Error, "take-over: SIGKILL failed (errno)", i64::from(errno)),
                Some(KillOutcome::NotVerified) => sink.emit(Warning, "take-over: nobody signalled: no runtime verified at its registration (page pid)", pid_value(pid)),
            }
            if let Some(ms) = beat_age_ms {
                sink.emit(Info, "take-over: age of the runtime's last beat (ms)", ms as i64);
            }
        }
        GuardEvent::BoardOpened => sink.emit(Info, "chest board opened: sending all-off every 12 ms", 0),
        GuardEvent::BoardOpenFailed(f) => sink.emit(Warning, fault_text(true, f), 0),
        GuardEvent::FrameFailed(f) => sink.emit(Warning, fault_text(false, f), 0),
        GuardEvent::HandedOver { pid } => sink.emit(Info, "a restarted runtime registered: chest board handed over, switch stays tripped; it must beat within the hand-over bound, 1 s (pid)", i64::from(pid)),
        GuardEvent::Refused { pid } => sink.emit(Warning, "the page names a process that is not the runtime that registered (gone, a reused pid, or not restarted since the take-over): cleared, never signalled (pid)", i64::from(pid)),
        GuardEvent::Released => sink.emit(Info, "re-armed with no runtime running: chest board released, driver fields cleared", 0),
        GuardEvent::PageRepaired => sink.emit(Error, "PageRepaired: the page had lost its magic; made whole, tripped page-lost", 0),
        GuardEvent::PageReplaced => sink.emit(Error, "PageReplaced: the page file was replaced or deleted; now mapped to the page at the path, tripped page-lost", 0),
        GuardEvent::UdpBound { port } => sink.emit(Info, "UDP stop listening (port)", i64::from(port)),
        GuardEvent::UdpBindFailed { errno, .. } => sink.emit(Warning, "cannot bind or share the UDP stop port, retrying every 50 ms (errno)", i64::from(errno)),
        GuardEvent::UdpStop { tripped } => sink.emit(Error, "UDP stop received (1: tripped now)", i64::from(tripped)),
        GuardEvent::UdpPanicked => sink.emit(Error, "the UDP listener panicked: tripped fault; the runtime's listener still reads the port", 0),
        GuardEvent::Stopping => sink.emit(Info, "guard stopping", 0),
        GuardEvent::Registered { pid } => sink.emit(Info, "runtime registered: holding its pidfd (pid)", i64::from(pid)),
        GuardEvent::PidfdFailed { errno, .. } => sink.emit(Warning, "cannot open the runtime's pidfd (needs Linux 5.3): watching its exit through its exit-watch connection, by pid until it is bound (errno)", i64::from(errno)),
        GuardEvent::ExitWatchBound { pid } => sink.emit(Info, "runtime's exit-watch connection bound: its exit is seen at once (pid)", i64::from(pid)),
        GuardEvent::ExitWatchAcceptFailed { errno } => sink.emit(Error, "cannot accept the runtime's exit-watch connection, retrying every 2 ms; its exit is seen by the heartbeat meanwhile (errno; 24 is EMFILE: raise LimitNOFILE)", i64::from(errno)),
    }
}

/// The capacity of each of the guard's event rings.
pub const RING_CAPACITY: usize = 1024;

/// A logbook writing to stderr (systemd's journal takes stderr).
pub fn stderr_logbook() -> Logbook {
    use slog::Drain;
    let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    Logbook::new(slog::Logger::root(
        drain,
        slog::o!("prog" => "nao-rs-guard"),
    ))
}

/// A logbook that writes nothing (tests).
pub fn discard_logbook() -> Logbook {
    Logbook::new(slog::Logger::root(slog::Discard, slog::o!()))
}
