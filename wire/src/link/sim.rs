//! The virtual robot's link: the USB calls of [`Link`] carried over a Unix
//! stream socket to `nao-rs-sim` (selected with `--link sim:PATH`).
//!
//! One connection is one opened device: [`Link::open`] connects to the
//! socket, [`Link::close`] tells the simulator and drops the connection.
//! The simulator keeps interface 0 exclusive like the kernel does: a claim
//! (or a bulk transfer, which claims implicitly) while another connection
//! holds it fails with [`LinkError::Busy`]; the claim is released when its
//! connection closes, so a holder killed with SIGKILL releases it at once.
//!
//! The messages are those of [`codec`] (one request, one reply, each with
//! a length prefix).
//!
//! The simulator does the waiting (a `bulk_in` with no answer pending
//! returns timeout after 20 ms, as USB does); this link only adds a safety
//! read timeout of 2 s in case the simulator hangs, reported
//! as [`LinkError::Timeout`]. A closed or reset connection (the simulator
//! died) is [`LinkError::NoDevice`], like an unplugged board.
//!
//! The link allocates nothing per call on success: requests and replies go
//! through buffers allocated in [`SimLink::new`] (grown only by a control
//! transfer larger than 2 KiB).

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::codec;
use super::{Call, Link, LinkError};

/// How long the link waits for any reply before it reports a timeout. The
/// simulator itself never takes longer than a bulk timeout (20 ms).
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// The socket path of a `--link` value `sim:PATH`, or `None` for any other
/// value (`usb`, ...). An empty path is `None`.
pub fn sim_path(link: &str) -> Option<PathBuf> {
    let path = link.strip_prefix("sim:")?;
    if path.is_empty() {
        None
    } else {
        Some(PathBuf::from(path))
    }
}

/// The chest board of the virtual robot `nao-rs-sim`, over its Unix socket.
pub struct SimLink {
    path: PathBuf,
    stream: Option<UnixStream>,
    req: Vec<u8>,
    reply: Vec<u8>,
    detail: Option<String>,
}

impl SimLink {
    /// A closed link to the simulator listening at `path`; [`Link::open`]
    /// connects.
    pub fn new(path: impl AsRef<Path>) -> Self {
        SimLink {
            path: path.as_ref().to_path_buf(),
            stream: None,
            req: Vec::with_capacity(2048),
            reply: Vec::with_capacity(2048),
            detail: None,
        }
    }

    /// The link of a `--link` value `sim:PATH`, or `None` for another value.
    pub fn from_link_arg(link: &str) -> Option<Self> {
        sim_path(link).map(SimLink::new)
    }

    /// Whether a device is open (connected).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.stream.is_some()
    }

    /// Keeps the message of a failure and returns its kind.
    fn fail(&mut self, e: LinkError, what: impl std::fmt::Display) -> LinkError {
        self.detail = Some(format!("virtual robot at {}: {what}", self.path.display()));
        e
    }

    /// Sends `call` and decodes its reply. Connection errors drop the
    /// connection and map to `NoDevice` (closed) or `Timeout` (no reply in
    /// time).
    fn exchange(&mut self, call: &Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        if let Err(why) = codec::check_request(call) {
            return Err(self.fail(LinkError::Other, why));
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(LinkError::NoDevice);
        };
        self.req.clear();
        codec::message(&mut self.req, |b| codec::encode_request(call, b));
        if let Err(e) = exchange(stream, &self.req, &mut self.reply) {
            self.stream = None;
            return Err(match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => LinkError::Timeout,
                io::ErrorKind::InvalidData => self.fail(
                    LinkError::Other,
                    format_args!("{e}; is this a nao-rs-sim socket?"),
                ),
                _ => LinkError::NoDevice,
            });
        }
        match codec::decode_reply(call, &self.reply, answer) {
            Ok(n) => Ok(n),
            Err((e, "")) => Err(e),
            Err((e, why)) => {
                let why = why.to_string();
                Err(self.fail(e, format_args!("{call}: {why}")))
            }
        }
    }

    fn connect(&mut self, call: &Call<'_>) -> Result<usize, LinkError> {
        self.close_stream();
        let stream = UnixStream::connect(&self.path).map_err(|_| LinkError::NoDevice)?;
        let timeouts = stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(REPLY_TIMEOUT)));
        if let Err(e) = timeouts {
            return Err(self.fail(
                LinkError::Other,
                format_args!("cannot set socket timeouts: {e}"),
            ));
        }
        self.stream = Some(stream);
        let r = self.exchange(call, &mut []);
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    fn close_stream(&mut self) {
        if self.stream.is_some() {
            // The claim is released by the simulator before it replies; a
            // dead simulator has released everything anyway.
            let _ = self.exchange(&Call::Close, &mut []);
            if let Some(s) = self.stream.take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// Writes one request and reads one reply body into `reply`.
fn exchange(stream: &mut UnixStream, req: &[u8], reply: &mut Vec<u8>) -> io::Result<()> {
    stream.write_all(req)?;
    codec::read_message(stream, reply, "reply")
}

impl Link for SimLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        match call {
            Call::Open { .. } => self.connect(&call),
            Call::Close => {
                self.close_stream();
                Ok(0)
            }
            _ => self.exchange(&call, answer),
        }
    }

    fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
}

impl Drop for SimLink {
    fn drop(&mut self) {
        self.close_stream();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_arg_sim_path_selects_the_sim_link() {
        assert_eq!(
            sim_path("sim:/tmp/x.sock"),
            Some(PathBuf::from("/tmp/x.sock"))
        );
        assert_eq!(sim_path("sim:"), None);
        assert_eq!(sim_path("usb"), None);
        assert!(SimLink::from_link_arg("sim:/a").is_some());
    }

    #[test]
    fn open_without_a_simulator_is_no_device() {
        let dir = std::env::temp_dir().join(format!("nao-rs-simlink-test-{}", std::process::id()));
        let mut link = SimLink::new(dir.join("missing.sock"));
        assert_eq!(link.open(0xffff, 0x0006), Err(LinkError::NoDevice));
        assert_eq!(link.bulk_out(0x02, &[1, 2]), Err(LinkError::NoDevice));
        assert!(!link.is_open());
    }
}
