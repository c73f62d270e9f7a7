//! The UDP stop (`spec/death-switch.md`): a datagram whose payload starts
//! with the 11 ASCII bytes `NAO-RS STOP` trips the switch (reason `udp`);
//! anything else is ignored; there is never a reply.
//!
//! Only one socket can receive a unicast datagram, so exactly one process
//! owns the port: the guard when it runs (it publishes itself in the page),
//! else the runtime. The runtime's listener binds only while no live guard
//! is published, closes its socket within 1 s once one is, and retries the
//! bind every second otherwise ([`PortRule`]).

use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The stop datagram's prefix and port: one place, with the death switch.
pub use deathswitch::stop::{is_stop, PORT as DEFAULT_PORT, PREFIX as STOP_PREFIX};
/// How long the listener blocks on one receive, so it re-checks the guard
/// at least this often (well within the 1 s rule).
pub const RECV_TIMEOUT_MS: u64 = 50;
/// How often an unbound listener retries the bind, ms.
pub const RETRY_MS: u64 = 1000;

/// What the listener should do next (the port ownership rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortAction {
    /// Keep the socket (or stay unbound) and go on.
    Stay,
    /// Bind the port now.
    Bind,
    /// Close the socket: a live guard owns the port.
    Close,
}

/// The port ownership rule (pure; time in ms passed in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRule {
    bound: bool,
    next_try_ms: u64,
}

impl Default for PortRule {
    fn default() -> Self {
        Self::new()
    }
}

impl PortRule {
    /// Unbound, with a bind due at once.
    pub fn new() -> Self {
        PortRule {
            bound: false,
            next_try_ms: 0,
        }
    }

    /// True while the runtime holds the socket.
    pub fn is_bound(&self) -> bool {
        self.bound
    }

    /// What to do at `now_ms` when a live guard is (or is not) published.
    pub fn step(&mut self, now_ms: u64, guard_alive: bool) -> PortAction {
        match (self.bound, guard_alive) {
            (true, true) => {
                self.bound = false;
                self.next_try_ms = now_ms + RETRY_MS;
                PortAction::Close
            }
            (true, false) => PortAction::Stay,
            (false, true) => PortAction::Stay,
            (false, false) if now_ms >= self.next_try_ms => PortAction::Bind,
            (false, false) => PortAction::Stay,
        }
    }

    /// The result of a [`PortAction::Bind`]: a failure retries in 1 s.
    pub fn bind_result(&mut self, now_ms: u64, ok: bool) {
        self.bound = ok;
        if !ok {
            self.next_try_ms = now_ms + RETRY_MS;
        }
    }

    /// True when neither the runtime nor a live guard holds the port, as
    /// far as the runtime can tell (the safety flag "UDP port not owned").
    pub fn not_owned(&self, guard_alive: bool) -> bool {
        !self.bound && !guard_alive
    }
}

/// What the listener shares with the rest of the runtime.
#[derive(Debug, Default)]
pub struct UdpShared {
    /// True while neither the runtime nor a live guard holds the port.
    pub not_owned: AtomicBool,
    /// True while the runtime's socket is bound.
    pub bound: AtomicBool,
}

/// Runs the listener until one of `stop` is set: binds per [`PortRule`], trips with
/// `trip` on every stop datagram, ignores everything else, never replies.
///
/// `guard_alive` tells whether a live guard is published in the page.
/// `on_event` receives one call per ownership change (not per datagram).
pub fn listen(
    port: u16,
    stop: &[&AtomicBool],
    shared: &UdpShared,
    mut guard_alive: impl FnMut() -> bool,
    mut trip: impl FnMut(),
    mut on_event: impl FnMut(UdpEvent),
) {
    let start = std::time::Instant::now();
    let mut rule = PortRule::new();
    let mut socket: Option<UdpSocket> = None;
    let mut buf = [0u8; 64];
    let mut last_bind_error: Option<i32> = None;
    // Acquire: pairs with the Release that sets a `stop` flag.
    while !stop.iter().any(|f| f.load(Ordering::Acquire)) {
        let now_ms = start.elapsed().as_millis() as u64;
        let alive = guard_alive();
        match rule.step(now_ms, alive) {
            PortAction::Close => {
                socket = None;
                on_event(UdpEvent::ClosedForGuard);
            }
            PortAction::Bind => match bind(port) {
                Ok(s) => {
                    socket = Some(s);
                    rule.bind_result(now_ms, true);
                    last_bind_error = None;
                    on_event(UdpEvent::Bound);
                }
                Err(e) => {
                    rule.bind_result(now_ms, false);
                    let code = e.raw_os_error().unwrap_or(0);
                    if last_bind_error != Some(code) {
                        on_event(UdpEvent::BindFailed(code));
                    }
                    last_bind_error = Some(code);
                }
            },
            PortAction::Stay => {}
        }
        // Relaxed: status flags, read by the cycle to build its safety status.
        shared
            .not_owned
            .store(rule.not_owned(alive), Ordering::Relaxed);
        shared.bound.store(rule.is_bound(), Ordering::Relaxed);
        match &socket {
            // A timeout or an ICMP error: re-check the guard and go on.
            Some(s) => {
                if let Ok((n, _from)) = s.recv_from(&mut buf) {
                    if is_stop(&buf[..n]) {
                        trip();
                    }
                }
            }
            None => std::thread::sleep(Duration::from_millis(RECV_TIMEOUT_MS)),
        }
    }
}

/// A change of the listener's ownership of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpEvent {
    /// The runtime bound the port.
    Bound,
    /// The bind failed with this errno (logged once per errno).
    BindFailed(i32),
    /// The runtime closed its socket because a live guard is published.
    ClosedForGuard,
}

fn bind(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    s.set_read_timeout(Some(Duration::from_millis(RECV_TIMEOUT_MS)))?;
    Ok(s)
}

/// The listener as a thread: starts it and returns the handle that stops it.
pub struct UdpListener {
    stop: Arc<AtomicBool>,
    shared: Arc<UdpShared>,
    handle: Option<crate::kit::Actor<Option<()>>>,
}

impl UdpListener {
    /// The flags the listener publishes.
    pub fn shared(&self) -> &Arc<UdpShared> {
        &self.shared
    }

    /// Starts the listener as an actor at `priority` (SCHED_FIFO, below the
    /// cycle's so that a flood can never delay a frame). It also ends when
    /// `runtime_stop` is set (the runtime's stop request).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        port: u16,
        runtime_stop: Arc<AtomicBool>,
        priority: Option<u8>,
        guard_alive: impl FnMut() -> bool + Send + 'static,
        trip: impl FnMut() + Send + 'static,
        on_event: impl FnMut(UdpEvent) + Send + 'static,
        on_panic: impl FnOnce() + Send + 'static,
    ) -> io::Result<UdpListener> {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(UdpShared::default());
        let (s, sh) = (stop.clone(), shared.clone());
        let mut spec = crate::kit::ActorSpec::new("nao-rs-udp");
        spec.priority = priority;
        let actor = crate::kit::actor::spawn_guarded(
            spec,
            move || listen(port, &[&s, &runtime_stop], &sh, guard_alive, trip, on_event),
            on_panic,
        )?;
        Ok(UdpListener {
            stop,
            shared,
            handle: Some(actor),
        })
    }

    /// Stops the listener (within 50 ms) and waits for it.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        // Release: pairs with the Acquire in `listen`.
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for UdpListener {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn udp_stop_prefix_is_the_11_bytes_nao_rs_stop() {
        assert_eq!(STOP_PREFIX.len(), 11);
        assert!(is_stop(b"NAO-RS STOP"));
        assert!(is_stop(b"NAO-RS STOP\n"));
        assert!(is_stop(b"NAO-RS STOP please, anything after is ignored"));
        assert!(!is_stop(b"NAO-RS STO"));
        assert!(!is_stop(b"nao-rs stop"));
        assert!(!is_stop(b" NAO-RS STOP"));
        assert!(!is_stop(b""));
    }

    #[test]
    fn udp_listener_binds_only_while_no_live_guard_is_published() {
        let mut r = PortRule::new();
        assert_eq!(r.step(0, true), PortAction::Stay);
        assert!(!r.not_owned(true));
        assert_eq!(r.step(10, false), PortAction::Bind);
        r.bind_result(10, true);
        assert_eq!(r.step(20, false), PortAction::Stay);
        assert!(!r.not_owned(false));
    }

    #[test]
    fn udp_listener_closes_its_socket_once_a_guard_is_published() {
        let mut r = PortRule::new();
        r.step(0, false);
        r.bind_result(0, true);
        assert_eq!(r.step(100, true), PortAction::Close);
        assert!(!r.is_bound());
        // The guard dies: the bind is retried a second after the close.
        assert_eq!(r.step(500, false), PortAction::Stay);
        assert!(r.not_owned(false));
        assert_eq!(r.step(1100, false), PortAction::Bind);
    }

    #[test]
    fn udp_bind_failure_retries_every_second() {
        let mut r = PortRule::new();
        assert_eq!(r.step(0, false), PortAction::Bind);
        r.bind_result(0, false);
        assert!(r.not_owned(false));
        assert_eq!(r.step(999, false), PortAction::Stay);
        assert_eq!(r.step(1000, false), PortAction::Bind);
    }

    fn free_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn udp_stop_trips_and_anything_else_is_ignored_without_reply() {
        let port = free_port();
        let trips = Arc::new(AtomicU32::new(0));
        let t = trips.clone();
        let l = UdpListener::start(
            port,
            Default::default(),
            None,
            || false,
            move || {
                t.fetch_add(1, Ordering::SeqCst);
            },
            |_| {},
            || {},
        )
        .unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        // Wait until bound.
        for _ in 0..100 {
            if l.shared().bound.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for _ in 0..1000 {
            sender.send_to(b"hello", ("127.0.0.1", port)).unwrap();
        }
        sender.send_to(b"NAO-RS STO", ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(trips.load(Ordering::SeqCst), 0);
        sender.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
        for _ in 0..100 {
            if trips.load(Ordering::SeqCst) > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(trips.load(Ordering::SeqCst), 1);
        let mut b = [0u8; 16];
        assert!(
            sender.recv_from(&mut b).is_err(),
            "the listener never replies"
        );
        l.stop();
    }

    #[test]
    fn udp_port_not_owned_when_bind_fails_and_no_guard() {
        let holder = UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let e = events.clone();
        let l = UdpListener::start(
            port,
            Default::default(),
            None,
            || false,
            || {},
            move |ev| e.lock().unwrap().push(ev),
            || {},
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(l.shared().not_owned.load(Ordering::Relaxed));
        let ev = events.lock().unwrap().clone();
        assert!(matches!(ev.as_slice(), [UdpEvent::BindFailed(_)]), "{ev:?}");
        l.stop();
    }
}
