//! The UDP stop (spec/death-switch.md): port 7701, a datagram whose payload
//! starts with the 11 bytes `NAO-RS STOP` trips reason `udp`; anything else
//! is ignored; no reply. Runs in its own thread at normal priority, so a
//! flood never touches the 2 ms poll.
//!
//! Port ownership: the guard publishes itself in the page at start
//! (`set_guard`); the runtime closes its own socket within 1 s once it sees a
//! live guard, so until then the bind fails with EADDRINUSE and is retried
//! every second.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::log::{Event, LogSender};
use deathswitch::stop::is_stop as is_stop_datagram;

/// How long between bind attempts.
pub const BIND_RETRY: Duration = Duration::from_secs(1);

/// Start the listener on `0.0.0.0:port`. `trip` is called for each stop
/// datagram and returns whether that call tripped the switch. The thread ends
/// within 200 ms of `stop`.
pub fn spawn<F>(
    port: u16,
    mut log: LogSender,
    stop: Arc<AtomicBool>,
    trip: F,
) -> std::io::Result<JoinHandle<()>>
where
    F: Fn() -> bool + Send + 'static,
{
    std::thread::Builder::new()
        .name("guard-udp".into())
        .spawn(move || {
            let sock = loop {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                match bind(port) {
                    Ok(s) => break s,
                    Err(e) => {
                        log.send(Event::UdpBindFailed {
                            port,
                            errno: e.raw_os_error().unwrap_or(0),
                        });
                        let until = std::time::Instant::now() + BIND_RETRY;
                        while std::time::Instant::now() < until && !stop.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            };
            log.send(Event::UdpBound { port });
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Acquire) {
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if is_stop_datagram(&buf[..n]) {
                            let tripped = trip();
                            let from_v4 = match from {
                                SocketAddr::V4(a) => u32::from(*a.ip()),
                                SocketAddr::V6(_) => 0,
                            };
                            log.send(Event::UdpStop { from_v4, tripped });
                        }
                    }
                    // Timeout (to look at `stop`), or a datagram too long for the
                    // buffer on some systems: ignore.
                    Err(_) => continue,
                }
            }
        })
}

fn bind(port: u16) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    Ok(s)
}
