//! The guard's UDP stop: the runtime's listener
//! (`nao_actors::runtime::udp`), the one listener both processes run. Both
//! hold one socket on the port and read its one queue, so no start, exit,
//! crash or hang of either process leaves a stop unread while the other
//! lives (`docs/guard.md`, "The UDP stop"). The guard's listener runs at
//! SCHED_FIFO [`GUARD_UDP_PRIORITY`], above the runtime's cycle, panic-guarded.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use nao_actors::runtime::udp::{UdpEvent, UdpListener};

use nao_actors::kit::log::EventSink;

use crate::log::{emit, GuardEvent};

/// The guard's UDP listener's SCHED_FIFO priority: above the runtime's
/// cycle (30), below the guard's poll (40).
pub const GUARD_UDP_PRIORITY: u8 = 39;

/// Starts the guard's listener on `port`. `trip` is called for each stop
/// datagram and returns whether that call tripped the switch; `on_panic`
/// runs if the listener panics. Ends when `stop` is set.
pub fn spawn<F, P>(
    port: u16,
    mut events: EventSink,
    mut stops: EventSink,
    stop: Arc<AtomicBool>,
    trip: F,
    on_panic: P,
) -> std::io::Result<UdpListener>
where
    F: Fn() -> bool + Send + 'static,
    P: FnOnce() + Send + 'static,
{
    UdpListener::start_named(
        "guard-udp",
        port,
        stop,
        Some(GUARD_UDP_PRIORITY),
        move || {
            let tripped = trip();
            emit(&mut stops, GuardEvent::UdpStop { tripped });
        },
        move |e| match e {
            UdpEvent::Bound => emit(&mut events, GuardEvent::UdpBound { port }),
            UdpEvent::BindFailed(errno) => {
                emit(&mut events, GuardEvent::UdpBindFailed { port, errno })
            }
        },
        on_panic,
    )
}
