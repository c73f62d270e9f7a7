//! The runtime's UDP stop: the one listener of both processes
//! (`deathswitch::stop::udp`, beside the stop's datagram rule) on an actor
//! of the kit. Only the glue lives here: the listener's thread, and its
//! events on the kit's log.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use deathswitch::stop::udp::{self as listener, ListenConfig, Severity};
use deathswitch::Reason;
use nao_kit::log::{EventSink, Level};

pub use deathswitch::stop::udp::{
    describe, handover_path, inherit_from_systemd, UdpEvent, UdpShared,
};
/// The stop port: one place, with the death switch.
pub use deathswitch::stop::PORT as DEFAULT_PORT;

/// The kit's log level of a listener's event.
fn level(s: Severity) -> Level {
    match s {
        Severity::Info => Level::Info,
        Severity::Warning => Level::Warning,
        Severity::Error => Level::Error,
    }
}

/// Queues the log line of `e` on `sink` ([`describe`]).
pub fn log_event(sink: &mut EventSink, e: UdpEvent, port: u16) {
    let (severity, what, value) = describe(e, port);
    sink.emit(level(severity), what, value);
}

/// The listener on an actor of the kit: the handle that stops it.
pub struct UdpListener(listener::UdpListener);

impl UdpListener {
    /// The flags the listener publishes.
    pub fn shared(&self) -> &Arc<UdpShared> {
        self.0.shared()
    }

    /// Starts the listener as a panic-guarded actor `name` (the runtime's
    /// is `nao-rs-udp`) at `priority` (SCHED_FIFO), on `port` with the
    /// hand-over file `handover` ([`handover_path`] of the page). It also
    /// ends when `runtime_stop` is set (the process's stop request). `trip`
    /// is called with `Reason::Udp` for each stop datagram and
    /// `Reason::StopPortUnread` while the port is unread; `on_panic` runs
    /// if the listener panics.
    #[allow(clippy::too_many_arguments)]
    pub fn start_named(
        name: &str,
        port: u16,
        handover: PathBuf,
        runtime_stop: Arc<AtomicBool>,
        priority: Option<u8>,
        trip: impl FnMut(Reason) + Send + 'static,
        on_event: impl FnMut(UdpEvent) + Send + 'static,
        on_panic: impl FnOnce() + Send + 'static,
    ) -> io::Result<UdpListener> {
        let mut spec = nao_kit::ActorSpec::new(name);
        spec.priority = priority;
        listener::UdpListener::start(
            ListenConfig::new(port, handover),
            runtime_stop,
            trip,
            on_event,
            |l| {
                let actor = nao_kit::actor::spawn_guarded(spec, move || l.run(), on_panic)?;
                Ok(move || {
                    let _ = actor.join();
                })
            },
        )
        .map(UdpListener)
    }

    /// Stops the listener (within 50 ms) and waits for it.
    pub fn stop(self) {
        self.0.stop();
    }
}
