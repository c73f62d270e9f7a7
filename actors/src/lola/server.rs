//! The Unix socket server: non-blocking, one thread, normal priority.
//!
//! Each cycle ([`LolaServer::step`]): accept new clients, wait for the
//! body's sensors, read every client's messages (the answers to the last
//! frame), push the controller's command, then write the new frame to every
//! client. Buffers are allocated when a client connects (8 KiB in, 896
//! bytes out); the cycle path itself allocates only inside `rmp-serde`'s
//! reader when a message arrives (see [`super::actuator::decode`]).
//!
//! A frame is never interleaved with another: a client whose socket buffer
//! is full keeps its unsent remainder and skips new frames until the
//! remainder is out, so its stream stays a sequence of whole 896-byte
//! frames.
//!
//! No client can stall the server: each client is read at most
//! [`READ_BUDGET`] bytes a step, so clients streaming as fast as they can
//! (monitors included) never starve the controlling client or the cycle.
//! A client that disconnects (end of file, a reset connection on read or
//! write, a broken pipe) is a normal disconnect. A new client takes over
//! the controller's role when the controller's connection is already gone
//! (hung up) when it connects, so a controller that reconnects within one
//! cycle is the controller again, not a monitor.

use std::io::{ErrorKind, Read};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};
use slog::{info, warn};

use nao_wire::JOINTS;

use super::actuator::{decode, DecodeError};
use super::bridge::Bridge;
use super::frame::{LolaSensorFrame, FRAME_LEN};
use super::{Body, LolaConfig, LolaError};

/// Bytes a client's unread messages may take; a message that does not fit
/// is malformed (LoLA's largest actuator message is about 800 bytes).
pub(super) const IN_CAPACITY: usize = 8192;

/// Bytes read from one client in one step, at most: a client streaming as
/// fast as it can is read this much and then left for the next step (LoLA
/// clients send one message of under 1 KiB a cycle).
pub(super) const READ_BUDGET: usize = IN_CAPACITY;

/// Cycles without a message from the controller after which the silence
/// is logged (once): the runtime's controller-lost ramp starts here too
/// (`docs/protocol.md` section 9).
pub(super) const SILENT_LOG_CYCLES: u32 = 25;

/// Counters since the server started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stats {
    /// Cycles served (sensor frames built).
    pub(crate) cycles: u64,
    /// Whole frames handed to clients' sockets.
    pub(crate) frames_sent: u64,
    /// Frames a client skipped because its socket was still full.
    pub(crate) frames_skipped: u64,
    /// Actuator messages decoded (all clients).
    pub(crate) messages: u64,
    /// Commands pushed into the body.
    pub(crate) commands_pushed: u64,
    /// Commands the body handed back (full ring).
    pub(crate) ring_full: u64,
    /// Clients closed for a malformed message.
    pub(crate) malformed: u64,
    /// Clients that disconnected normally (end of file, reset, broken pipe).
    pub(crate) disconnects: u64,
    /// Clients closed for another I/O error.
    pub(crate) io_errors: u64,
    /// Clients that took over the controller's role from a hung-up
    /// controller (a reconnect).
    pub(crate) controller_reconnects: u64,
    /// Clients connected now.
    pub(crate) clients: usize,
    /// Whether a controlling client is connected now.
    pub(crate) has_controller: bool,
}

struct Client {
    id: u64,
    stream: UnixStream,
    inbuf: Box<[u8; IN_CAPACITY]>,
    in_len: usize,
    out: Box<[u8; FRAME_LEN]>,
    out_pos: usize,
}

enum Close {
    Eof,
    Error(String),
    Malformed(String),
}

/// The LoLA socket server.
pub struct LolaServer {
    listener: UnixListener,
    path: PathBuf,
    config: LolaConfig,
    clients: Vec<Client>,
    controller: Option<u64>,
    next_id: u64,
    bridge: Bridge,
    frame: Box<[u8; FRAME_LEN]>,
    last_position: [f32; JOINTS],
    stats: Stats,
    ring_was_full: bool,
}

fn bind(path: &std::path::Path) -> Result<UnixListener, LolaError> {
    // Mode 0660 whatever the umask, with no window in which another user
    // can connect: bound in a private directory, renamed into place
    // (`crate::socket_file`). A path someone else holds is an
    // error that names it and the fix.
    crate::socket_file::bind_with_mode(
        path,
        crate::socket_file::Kind::Stream,
        "LoLA socket",
        "choose another path with --lola-socket",
        |p| UnixListener::bind(p),
    )
    .map_err(|e| LolaError(e.to_string()))
}

impl LolaServer {
    /// Binds the socket at `config.socket`, mode 0660 whatever the umask
    /// (group `hal` when it exists). A stale socket file of this user
    /// (nobody accepts on it) is replaced; one another program serves, a
    /// socket file of another user, or a file that is not a socket is an
    /// error that names the path and the fix.
    ///
    /// # Errors
    ///
    /// [`LolaError`] naming the path and the fix when the path is taken or
    /// the socket cannot be bound.
    pub fn bind(config: LolaConfig) -> Result<Self, LolaError> {
        let path = config.socket.clone();
        let listener = bind(&path)?;
        listener.set_nonblocking(true).map_err(|e| {
            LolaError(format!(
                "LoLA socket {}: set non-blocking: {e}",
                path.display()
            ))
        })?;
        info!(config.log, "LoLA socket listening"; "path" => %path.display());
        let max = config.max_clients;
        Ok(LolaServer {
            listener,
            path,
            config,
            clients: Vec::with_capacity(max),
            controller: None,
            next_id: 0,
            bridge: Bridge::new(),
            frame: Box::new([0; FRAME_LEN]),
            last_position: [0.0; JOINTS],
            stats: Stats::default(),
            ring_was_full: false,
        })
    }

    /// The settings (the robot's identity in the sensor frame may be set
    /// once the runtime started, after the socket was bound).
    pub fn config_mut(&mut self) -> &mut LolaConfig {
        &mut self.config
    }

    /// The counters (read by the unit tests; the server keeps them).
    #[cfg(test)]
    pub(crate) fn stats(&self) -> Stats {
        Stats {
            clients: self.clients.len(),
            has_controller: self.controller.is_some(),
            ..self.stats
        }
    }

    /// Serves until `stop` is set or the body stops running, in steps of
    /// at most 50 ms.
    pub(crate) fn serve<B: Body>(&mut self, body: &mut B, stop: &AtomicBool) {
        // Relaxed: a plain flag; nothing else is published through it.
        while !stop.load(Ordering::Relaxed) && body.running() {
            self.step(body, Duration::from_millis(50));
        }
        info!(self.config.log, "LoLA socket stopped"; "cycles" => self.stats.cycles);
    }

    /// One step: accepts clients, waits up to `timeout` for a cycle's
    /// sensors and, when they come, serves the cycle. Returns whether a
    /// cycle was served. Without a cycle, clients are still read (so
    /// disconnects and malformed messages are noticed) and nothing is pushed.
    pub(crate) fn step<B: Body>(&mut self, body: &mut B, timeout: Duration) -> bool {
        self.accept();
        let Some(sensors) = body.next_sensors(timeout) else {
            self.accept();
            self.each_client(Self::read_client);
            return false;
        };
        self.accept();
        self.each_client(Self::read_client);
        self.last_position = sensors.position;
        let was_silent = self.bridge.silent_cycles();
        let cmd = self.bridge.on_cycle();
        let silent = self.bridge.silent_cycles();
        if self.controller.is_some() && silent == SILENT_LOG_CYCLES {
            warn!(self.config.log, "LoLA: the controlling client sent nothing for {} cycles: the runtime's controller-lost ramp lowers the stiffness", SILENT_LOG_CYCLES);
        } else if silent == 0 && was_silent >= SILENT_LOG_CYCLES {
            info!(self.config.log, "LoLA: the controlling client answers again"; "silent_cycles" => was_silent);
        }
        if let Some(cmd) = cmd {
            match body.push(cmd) {
                Ok(()) => {
                    self.stats.commands_pushed += 1;
                    self.ring_was_full = false;
                }
                Err(_) => {
                    self.stats.ring_full += 1;
                    if !self.ring_was_full {
                        warn!(self.config.log, "LoLA: the runtime's command ring is full; command dropped (the runtime is not taking commands)");
                    }
                    self.ring_was_full = true;
                }
            }
        }
        let frame = LolaSensorFrame::from_body(
            &sensors,
            &self.config.robot_config,
            &self.config.foot_pressure,
        );
        match frame.encode(&mut self.frame) {
            Ok(FRAME_LEN) => self.each_client(Self::write_client),
            Ok(n) => {
                warn!(self.config.log, "LoLA: sensor frame has a wrong size; not sent"; "bytes" => n)
            }
            Err(e) => warn!(self.config.log, "LoLA: {}", e),
        }
        self.stats.cycles += 1;
        true
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.add(stream),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!(self.config.log, "LoLA: accept failed: {}", e);
                    return;
                }
            }
        }
    }

    fn add(&mut self, stream: UnixStream) {
        if self.clients.len() >= self.config.max_clients {
            warn!(self.config.log, "LoLA: client refused: too many clients"; "max" => self.config.max_clients);
            return;
        }
        if let Err(e) = stream.set_nonblocking(true) {
            warn!(
                self.config.log,
                "LoLA: client refused: set non-blocking: {}", e
            );
            return;
        }
        self.drop_hung_up_controller();
        let id = self.next_id;
        self.next_id += 1;
        let role = if self.controller.is_none() {
            self.controller = Some(id);
            self.bridge.controller_attached(&self.last_position);
            "controller"
        } else {
            "monitor (sensor frames only)"
        };
        info!(self.config.log, "LoLA: client connected"; "client" => id, "role" => role);
        self.clients.push(Client {
            id,
            stream,
            inbuf: Box::new([0; IN_CAPACITY]),
            in_len: 0,
            out: Box::new([0; FRAME_LEN]),
            out_pos: FRAME_LEN,
        });
    }

    /// Before a new client is given its role: a controller whose peer has
    /// already hung up is closed now (its end of file may still be behind
    /// unread messages), so the new client is the controller.
    fn drop_hung_up_controller(&mut self) {
        let Some(id) = self.controller else {
            return;
        };
        let Some(i) = self.clients.iter().position(|c| c.id == id) else {
            return;
        };
        let mut fds = [PollFd::new(
            self.clients[i].stream.as_fd(),
            PollFlags::POLLIN,
        )];
        let gone = match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
            Err(_) => false,
        };
        if gone {
            self.stats.controller_reconnects += 1;
            self.close(i, Close::Eof);
        }
    }

    fn close(&mut self, index: usize, why: Close) {
        let c = self.clients.swap_remove(index);
        let controller = self.controller == Some(c.id);
        if controller {
            self.controller = None;
            self.bridge.controller_detached();
        }
        let role = if controller { "controller" } else { "monitor" };
        match why {
            Close::Eof => {
                self.stats.disconnects += 1;
                info!(self.config.log, "LoLA: client disconnected"; "client" => c.id, "role" => role)
            }
            Close::Error(e) => {
                self.stats.io_errors += 1;
                warn!(self.config.log, "LoLA: client closed: {}", e; "client" => c.id, "role" => role)
            }
            Close::Malformed(e) => {
                self.stats.malformed += 1;
                warn!(self.config.log, "LoLA: client closed: malformed actuator message: {}", e; "client" => c.id, "role" => role)
            }
        }
    }

    /// `step` for every client; a client it fails for is closed.
    fn each_client(&mut self, step: fn(&mut Self, usize) -> Result<(), Close>) {
        let mut i = 0;
        while i < self.clients.len() {
            match step(self, i) {
                Ok(()) => i += 1,
                Err(why) => self.close(i, why),
            }
        }
    }

    /// Reads and decodes what client `i` sent, at most [`READ_BUDGET`]
    /// bytes; the rest waits for the next step.
    fn read_client(&mut self, i: usize) -> Result<(), Close> {
        let mut budget = READ_BUDGET;
        while budget > 0 {
            let c = &mut self.clients[i];
            let room = (IN_CAPACITY - c.in_len).min(budget);
            match c.stream.read(&mut c.inbuf[c.in_len..c.in_len + room]) {
                Ok(0) => return Err(Close::Eof),
                Ok(n) => {
                    budget -= n;
                    c.in_len += n;
                    self.decode_client(i)?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // A reset connection is a normal disconnect, as on write.
                Err(e)
                    if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) =>
                {
                    return Err(Close::Eof)
                }
                Err(e) => return Err(Close::Error(format!("read: {e}"))),
            }
        }
        Ok(())
    }

    fn decode_client(&mut self, i: usize) -> Result<(), Close> {
        let controller = self.controller == Some(self.clients[i].id);
        loop {
            let c = &mut self.clients[i];
            match decode(&c.inbuf[..c.in_len]) {
                Ok((a, used)) => {
                    c.inbuf.copy_within(used..c.in_len, 0);
                    c.in_len -= used;
                    self.stats.messages += 1;
                    if controller {
                        self.bridge.on_message(&a);
                    }
                }
                Err(DecodeError::Incomplete) => {
                    if c.in_len == IN_CAPACITY {
                        return Err(Close::Malformed(format!(
                            "message longer than {IN_CAPACITY} bytes (LoLA's are under 1 KiB)"
                        )));
                    }
                    return Ok(());
                }
                Err(DecodeError::Malformed(m)) => return Err(Close::Malformed(m)),
            }
        }
    }

    /// Finishes a pending frame, then starts the new one if the old one is
    /// out; a still-pending frame skips the new one.
    fn write_client(&mut self, i: usize) -> Result<(), Close> {
        if self.clients[i].out_pos < FRAME_LEN {
            self.flush_client(i)?;
            if self.clients[i].out_pos < FRAME_LEN {
                self.stats.frames_skipped += 1;
                return Ok(());
            }
        }
        let c = &mut self.clients[i];
        c.out.copy_from_slice(&self.frame[..]);
        c.out_pos = 0;
        self.flush_client(i)
    }

    fn flush_client(&mut self, i: usize) -> Result<(), Close> {
        let c = &mut self.clients[i];
        while c.out_pos < FRAME_LEN {
            match send(
                c.stream.as_raw_fd(),
                &c.out[c.out_pos..],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(n) => c.out_pos += n,
                Err(Errno::EAGAIN) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(Errno::EPIPE) | Err(Errno::ECONNRESET) => return Err(Close::Eof),
                Err(e) => return Err(Close::Error(format!("write: {e}"))),
            }
        }
        self.stats.frames_sent += 1;
        Ok(())
    }
}

impl Drop for LolaServer {
    fn drop(&mut self) {
        // Remove our socket file (a client cannot connect to a dead server).
        let _ = std::fs::remove_file(&self.path);
    }
}
