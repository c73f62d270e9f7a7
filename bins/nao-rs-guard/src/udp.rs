//! The guard's UDP stop: the one listener both processes run
//! (`deathswitch::stop::udp`), here on a panic-guarded actor of the kit.
//! Both hold one socket on the port (systemd's `nao-rs-stop.socket` on the
//! robot, else handed over through `stop-PORT.sock` next to the page) and
//! read its one queue, so no start, exit, crash or hang of either process
//! leaves a stop unread while the other lives (`docs/guard.md`, "The UDP
//! stop"). The guard's listener runs at SCHED_FIFO [`GUARD_UDP_PRIORITY`],
//! above the runtime's cycle.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use deathswitch::stop::udp::{self, ListenConfig, UdpEvent, UdpListener};
use deathswitch::Reason;

use nao_kit::log::EventSink;

use crate::log::{emit, GuardEvent};

/// The guard's UDP listener's SCHED_FIFO priority: above the runtime's
/// cycle (30), below the guard's poll (40).
pub const GUARD_UDP_PRIORITY: u8 = 39;

/// Takes the stop socket systemd passed (`LISTEN_FDS`), if any, and clears
/// the variables; call it first in `main`, before other threads run.
pub fn inherit_from_systemd() {
    udp::inherit_from_systemd();
}

/// Starts the guard's listener as `config` says (its port, its hand-over
/// file `udp::handover_path` of the page, handed over to its holders only:
/// the runtime and guard the page registers, `udp::Holders::of` the page),
/// as the kit's actor `guard-udp`.
/// `trip` is called with `Reason::Udp` for each stop datagram and
/// `Reason::StopPortUnread` while the port is unread, and returns whether
/// that call tripped the switch; `on_panic` runs if the listener panics.
/// Ends when `stop` is set.
pub fn spawn<F, P>(
    config: ListenConfig,
    mut events: EventSink,
    mut stops: EventSink,
    stop: Arc<AtomicBool>,
    trip: F,
    on_panic: P,
) -> std::io::Result<UdpListener>
where
    F: Fn(Reason) -> bool + Send + 'static,
    P: FnOnce() + Send + 'static,
{
    let mut spec = nao_kit::actor::ActorSpec::new("guard-udp");
    spec.priority = Some(GUARD_UDP_PRIORITY);
    let port = config.port;
    UdpListener::start(
        config,
        stop,
        move |r| {
            let tripped = trip(r);
            if r == Reason::Udp {
                emit(&mut stops, GuardEvent::UdpStop { tripped });
            }
        },
        move |e| match e {
            UdpEvent::BindFailed(errno) => {
                emit(&mut events, GuardEvent::UdpBindFailed { port, errno })
            }
            other => {
                let (level, what, value) = udp::describe(other, port);
                events.emit(level, what, value);
            }
        },
        |listening| {
            let actor = nao_kit::actor::spawn_guarded(spec, move || listening.run(), on_panic)?;
            Ok(move || {
                let _ = actor.join();
            })
        },
    )
}
