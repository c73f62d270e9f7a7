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
//! # Wire encoding
//!
//! Every request and every reply is one message: a `u32` little-endian body
//! length, then the body. A request body is an op byte and its fields
//! (little endian); a reply body is a status byte and its data:
//!
//! | op | call | fields |
//! |---|---|---|
//! | 1 | open | vendor u16, product u16 |
//! | 2 | set_configuration | config u8 |
//! | 3 | claim_interface | iface u8 |
//! | 4 | close | none |
//! | 5 | control_out | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, data |
//! | 6 | control_in | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, wLength u16 |
//! | 7 | bulk_out | endpoint u8, data |
//! | 8 | bulk_in | endpoint u8, buffer length u16 |
//!
//! Status: 0 ok, 1 timeout, 2 pipe, 3 no device, 4 busy, 5 other (the data is
//! a UTF-8 message). The data of an ok reply: none for open, set_configuration,
//! claim_interface and close; the transferred length as `u32` for control_out
//! and bulk_out; the bytes read for control_in and bulk_in.
//!
//! The simulator does the waiting (a `bulk_in` with no answer pending
//! returns timeout after 20 ms, as USB does); this link only adds a safety
//! read timeout of [`REPLY_TIMEOUT`] in case the simulator hangs, reported
//! as [`LinkError::Timeout`]. A closed or reset connection (the simulator
//! died) is [`LinkError::NoDevice`], like an unplugged board.
//!
//! The link allocates nothing per call on success: requests and replies go
//! through buffers allocated in [`SimLink::new`] (grown only by a control
//! transfer larger than 2 KiB).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Link, LinkError};

/// Op: open (vendor u16, product u16).
pub const OP_OPEN: u8 = 1;
/// Op: set_configuration (config u8).
pub const OP_SET_CONFIGURATION: u8 = 2;
/// Op: claim_interface (iface u8).
pub const OP_CLAIM_INTERFACE: u8 = 3;
/// Op: close.
pub const OP_CLOSE: u8 = 4;
/// Op: control_out (bmRequestType, bRequest, wValue, wIndex, data).
pub const OP_CONTROL_OUT: u8 = 5;
/// Op: control_in (bmRequestType, bRequest, wValue, wIndex, wLength).
pub const OP_CONTROL_IN: u8 = 6;
/// Op: bulk_out (endpoint, data).
pub const OP_BULK_OUT: u8 = 7;
/// Op: bulk_in (endpoint, buffer length u16).
pub const OP_BULK_IN: u8 = 8;

/// Reply status: ok.
pub const ST_OK: u8 = 0;
/// Reply status: the transfer timed out.
pub const ST_TIMEOUT: u8 = 1;
/// Reply status: the endpoint stalled.
pub const ST_PIPE: u8 = 2;
/// Reply status: no device (unplugged, or the handle is stale).
pub const ST_NO_DEVICE: u8 = 3;
/// Reply status: another connection holds interface 0.
pub const ST_BUSY: u8 = 4;
/// Reply status: another error; the data is a UTF-8 message.
pub const ST_OTHER: u8 = 5;

/// The largest message body either side accepts (a 64 KiB control transfer
/// and its header fit).
pub const MAX_BODY: usize = 70_000;

/// How long the link waits for any reply before it reports a timeout. The
/// simulator itself never takes longer than a bulk timeout (20 ms).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// Maps a reply status (not [`ST_OK`]) and its data to a [`LinkError`].
pub fn status_error(status: u8, data: &[u8]) -> LinkError {
    match status {
        ST_TIMEOUT => LinkError::Timeout,
        ST_PIPE => LinkError::Pipe,
        ST_NO_DEVICE => LinkError::NoDevice,
        ST_BUSY => LinkError::Busy,
        _ => LinkError::Other(format!("virtual robot: {}", String::from_utf8_lossy(data))),
    }
}

/// The reply status of a [`LinkError`] (the inverse of [`status_error`]).
pub fn error_status(e: &LinkError) -> u8 {
    match e {
        LinkError::Timeout => ST_TIMEOUT,
        LinkError::Pipe => ST_PIPE,
        LinkError::NoDevice => ST_NO_DEVICE,
        LinkError::Busy => ST_BUSY,
        LinkError::Mismatch(_) | LinkError::Other(_) => ST_OTHER,
    }
}

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
        }
    }

    /// The link of a `--link` value `sim:PATH`, or `None` for another value.
    pub fn from_link_arg(link: &str) -> Option<Self> {
        sim_path(link).map(SimLink::new)
    }

    /// The simulator's socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a device is open (connected).
    pub fn is_open(&self) -> bool {
        self.stream.is_some()
    }

    /// Starts a request with `op` in the request buffer.
    fn begin(&mut self, op: u8) {
        self.req.clear();
        self.req.extend_from_slice(&[0, 0, 0, 0, op]);
    }

    /// Sends the request and reads the reply into `self.reply` (status at
    /// index 0). Connection errors drop the connection and map to
    /// `NoDevice` (closed) or `Timeout` (no reply in time).
    fn call(&mut self) -> Result<(), LinkError> {
        let body = (self.req.len() - 4) as u32;
        self.req[..4].copy_from_slice(&body.to_le_bytes());
        let Some(stream) = self.stream.as_mut() else {
            return Err(LinkError::NoDevice);
        };
        let r = exchange(stream, &self.req, &mut self.reply);
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stream = None;
                Err(match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => LinkError::Timeout,
                    io::ErrorKind::InvalidData => {
                        LinkError::Other(format!("virtual robot at {}: {e}", self.path.display()))
                    }
                    _ => LinkError::NoDevice,
                })
            }
        }
    }

    /// A call whose ok reply has no data.
    fn call_unit(&mut self) -> Result<(), LinkError> {
        self.call()?;
        match self.reply[0] {
            ST_OK => Ok(()),
            s => Err(status_error(s, &self.reply[1..])),
        }
    }

    /// A call whose ok reply is a u32 length.
    fn call_len(&mut self) -> Result<usize, LinkError> {
        self.call()?;
        match self.reply[0] {
            ST_OK if self.reply.len() >= 5 => {
                Ok(
                    u32::from_le_bytes([self.reply[1], self.reply[2], self.reply[3], self.reply[4]])
                        as usize,
                )
            }
            ST_OK => Err(LinkError::Other(format!(
                "virtual robot at {}: short reply ({} bytes) to a transfer",
                self.path.display(),
                self.reply.len()
            ))),
            s => Err(status_error(s, &self.reply[1..])),
        }
    }

    /// A call whose ok reply is data, copied into `buf`.
    fn call_data(&mut self, buf: &mut [u8]) -> Result<usize, LinkError> {
        self.call()?;
        match self.reply[0] {
            ST_OK => {
                let data = &self.reply[1..];
                if data.len() > buf.len() {
                    return Err(LinkError::Other(format!(
                        "virtual robot at {}: {} bytes returned for a {}-byte buffer (overflow)",
                        self.path.display(),
                        data.len(),
                        buf.len()
                    )));
                }
                buf[..data.len()].copy_from_slice(data);
                Ok(data.len())
            }
            s => Err(status_error(s, &self.reply[1..])),
        }
    }
}

/// Writes one request and reads one reply body into `reply`.
fn exchange(stream: &mut UnixStream, req: &[u8], reply: &mut Vec<u8>) -> io::Result<()> {
    stream.write_all(req)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_BODY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "reply body of {len} bytes (expected 1..={MAX_BODY}); is this a nao-rs-sim socket?"
            ),
        ));
    }
    reply.resize(len, 0);
    stream.read_exact(reply)
}

impl Link for SimLink {
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        self.close();
        let stream = UnixStream::connect(&self.path).map_err(|_| LinkError::NoDevice)?;
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(REPLY_TIMEOUT)))
            .map_err(|e| {
                LinkError::Other(format!(
                    "virtual robot at {}: cannot set socket timeouts: {e}",
                    self.path.display()
                ))
            })?;
        self.stream = Some(stream);
        self.begin(OP_OPEN);
        self.req.extend_from_slice(&vendor.to_le_bytes());
        self.req.extend_from_slice(&product.to_le_bytes());
        let r = self.call_unit();
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError> {
        self.begin(OP_SET_CONFIGURATION);
        self.req.push(config);
        self.call_unit()
    }

    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError> {
        self.begin(OP_CLAIM_INTERFACE);
        self.req.push(iface);
        self.call_unit()
    }

    fn close(&mut self) {
        if self.stream.is_some() {
            self.begin(OP_CLOSE);
            // The claim is released by the simulator before it replies; a
            // dead simulator has released everything anyway.
            let _ = self.call();
            if let Some(s) = self.stream.take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError> {
        if data.len() > usize::from(u16::MAX) {
            return Err(LinkError::Other(format!(
                "control_out of {} bytes: at most 65535",
                data.len()
            )));
        }
        self.begin(OP_CONTROL_OUT);
        self.req.extend_from_slice(&[request_type, request]);
        self.req.extend_from_slice(&value.to_le_bytes());
        self.req.extend_from_slice(&index.to_le_bytes());
        self.req.extend_from_slice(data);
        self.call_len()
    }

    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError> {
        let Ok(wlength) = u16::try_from(buf.len()) else {
            return Err(LinkError::Other(format!(
                "control_in with wLength {}: at most 65535",
                buf.len()
            )));
        };
        self.begin(OP_CONTROL_IN);
        self.req.extend_from_slice(&[request_type, request]);
        self.req.extend_from_slice(&value.to_le_bytes());
        self.req.extend_from_slice(&index.to_le_bytes());
        self.req.extend_from_slice(&wlength.to_le_bytes());
        self.call_data(buf)
    }

    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError> {
        if data.len() > MAX_BODY - 16 {
            return Err(LinkError::Other(format!(
                "bulk_out of {} bytes: the virtual robot takes at most {}",
                data.len(),
                MAX_BODY - 16
            )));
        }
        self.begin(OP_BULK_OUT);
        self.req.push(endpoint);
        self.req.extend_from_slice(data);
        self.call_len()
    }

    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError> {
        let len = u16::try_from(buf.len()).unwrap_or(u16::MAX);
        self.begin(OP_BULK_IN);
        self.req.push(endpoint);
        self.req.extend_from_slice(&len.to_le_bytes());
        self.call_data(buf)
    }
}

impl Drop for SimLink {
    fn drop(&mut self) {
        self.close();
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
    fn status_codes_map_to_link_errors_both_ways() {
        for e in [
            LinkError::Timeout,
            LinkError::Pipe,
            LinkError::NoDevice,
            LinkError::Busy,
        ] {
            assert_eq!(status_error(error_status(&e), &[]), e);
        }
        assert!(matches!(status_error(ST_OTHER, b"x"), LinkError::Other(m) if m.contains('x')));
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
