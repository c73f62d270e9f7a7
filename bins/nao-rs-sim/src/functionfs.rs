//! The second front end of the one virtual body: the chest board as a real
//! USB device of the kernel, through FunctionFS (`nao-rs-sim --functionfs
//! DIR`). A host on the other side of the UDC (on one machine: `dummy_hcd`)
//! sees USB `ffff:0006` and talks to it with `--link usb` (libusb), exactly
//! as to the chest board.
//!
//! Every request is translated to the Unix socket's wire encoding
//! (`nao_wire::link::sim`) and handled by the same [`Device`] through
//! [`Shared::request`], so the body, the faults, the trace and the control
//! socket are the ones of the socket front end:
//!
//! - the function enabled (the host's `set_configuration`) opens one
//!   connection and claims interface 0 (a new session of the body, as a new
//!   claim on the socket); disabled, unbound or reset, it is closed;
//! - a vendor control request (bmRequestType 0x40/0xc0, recipient device:
//!   the descriptors set `FUNCTIONFS_ALL_CTRL_RECIP`) is a control call;
//!   the ones the device refuses are stalled, as the socket's `Pipe`;
//! - a bulk OUT transfer is a frame; the answer, if the board has one (no
//!   drop, no stall), is queued on bulk IN for the host's read, and
//!   withdrawn if the host has not taken it within 5 ms (it gave up): no
//!   later read takes a stale answer (the socket's "pending
//!   answer" rule; counted as `withdrawn` in `status`).
//!
//! What differs: the kernel, not the device, keeps the claim exclusive
//! (usbfs), so the trace's `peer_pid` is 0 (the device cannot see the host's
//! process), and `ctl unplug`/`replug` only refuse service: a real unplug
//! is an unbind of the gadget from its UDC (see `docs/virtual-head.md`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nao_wire::link::codec::{
    OP_BULK_IN, OP_BULK_OUT, OP_CLAIM_INTERFACE, OP_CONTROL_IN, OP_CONTROL_OUT, OP_OPEN, ST_OK,
};
use nao_wire::link::{PRODUCT_ID, VENDOR_ID};
use nao_wire::protocol::frame::MAX_FRAME_LEN;
use nao_wire::protocol::tables::{BULK_IN_LEN, EP_IN, EP_OUT, INTERFACE};
use usb_gadget::function::custom::{
    CtrlReq, Custom, Endpoint, EndpointDirection, EndpointReceiver, EndpointSender, Event,
    Interface,
};
use usb_gadget::Class;

use crate::device::{Conn, Device};
use crate::server::{self, Shared};

/// Where the FunctionFS front end serves and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfsPaths {
    /// A mounted FunctionFS instance (`mount -t functionfs NAME DIR`), not
    /// yet initialised: its `ep0` takes the descriptors.
    pub dir: PathBuf,
    /// The control socket, if any (`--ctl`).
    pub ctl: Option<PathBuf>,
    /// The trace file (`--trace`).
    pub trace: Option<PathBuf>,
    /// Print nothing at start (`--quiet`).
    pub quiet: bool,
}

/// How long the bulk thread waits before it retries after a failed
/// transfer (the function disabled, unbound or reset by the host).
const RETRY: Duration = Duration::from_millis(2);

/// How long an answer stays on bulk IN for the host to take. The host
/// reads right after its write, so its read is normally waiting when the
/// answer is queued and takes it at once; an answer still there after this
/// long is one the host gave up on (its read timed out before the answer
/// was ready). Shorter than the host's 12 ms cycle, so the next frame's
/// read never finds it.
const WITHDRAW: Duration = Duration::from_millis(5);

/// Reads kept queued on bulk OUT.
const OUT_QUEUE: u32 = 2;

/// How long the bulk thread waits for a frame when no answer is queued.
const IDLE: Duration = Duration::from_secs(1);

/// The one connection of the USB front end: the host side of the cable.
struct HostCable {
    conn: Conn,
    open: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The vendor interface of the chest board: one bulk IN, one bulk OUT.
/// Its endpoints are numbered in this order (ep1 IN, ep2 OUT), which a UDC
/// that honours the descriptors maps to 0x81 and 0x02; `dummy_hcd` names
/// them so anyway.
fn descriptors() -> (
    usb_gadget::function::custom::CustomBuilder,
    EndpointSender,
    EndpointReceiver,
) {
    let (tx, tx_dir) = EndpointDirection::device_to_host();
    let (rx, rx_dir) = EndpointDirection::host_to_device();
    let mut builder = Custom::builder().with_interface(
        Interface::new(Class::vendor_specific(0, 0), "NAO chest board (nao-rs-sim)")
            .with_endpoint(Endpoint::bulk(tx_dir.with_queue_len(1)))
            .with_endpoint(Endpoint::bulk(rx_dir.with_queue_len(OUT_QUEUE))),
    );
    // The chest board's vendor requests have recipient device: without this
    // flag FunctionFS never sees them and the host gets a STALL.
    builder.all_ctrl_recipient = true;
    (builder, tx, rx)
}

/// Serves `device` on the FunctionFS instance at `paths.dir` until the
/// process ends. Errors name the path and the fix.
pub fn serve(device: Device, paths: &FfsPaths) -> Result<(), String> {
    let dir = &paths.dir;
    let shared = Shared::new(device, paths.trace.as_deref()).map_err(|e| e.to_string())?;
    if let Some(ctl) = &paths.ctl {
        let listener = server::bind(ctl).map_err(|e| e.to_string())?;
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sim-ctl".into())
            .spawn(move || server::serve_ctl(listener, &shared))
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
    }
    let (builder, tx, rx) = descriptors();
    let custom = builder.existing(dir).map_err(|e| init_error(dir, &e))?;
    if !paths.quiet {
        eprintln!(
            "nao-rs-sim: serving USB {VENDOR_ID:04x}:{PRODUCT_ID:04x} on FunctionFS {}{}{} \
             (bind the gadget to a UDC now)",
            dir.display(),
            paths
                .ctl
                .as_ref()
                .map(|c| format!(", control {}", c.display()))
                .unwrap_or_default(),
            paths
                .trace
                .as_ref()
                .map(|t| format!(", trace {}", t.display()))
                .unwrap_or_default()
        );
    }
    let link = Arc::new(Mutex::new(HostCable {
        conn: Conn::new(1, 0),
        open: false,
    }));
    {
        let (shared, link) = (Arc::clone(&shared), Arc::clone(&link));
        std::thread::Builder::new()
            .name("sim-bulk".into())
            .spawn(move || serve_bulk(tx, rx, &shared, &link))
            .map_err(|e| format!("cannot start the bulk thread: {e}"))?;
    }
    serve_ep0(custom, &shared, &link, dir, paths.quiet)
}

fn init_error(dir: &Path, e: &std::io::Error) -> String {
    format!(
        "cannot initialise the FunctionFS instance at {}: {e}; mount one first \
         (`mount -t functionfs NAME {}` after `mkdir functions/ffs.NAME` in a configfs gadget) \
         and start nao-rs-sim before binding the gadget to its UDC",
        dir.display(),
        dir.display()
    )
}

/// One line on stderr for a USB event (a few per session, never per frame).
fn note(quiet: bool, what: &str) {
    if !quiet {
        eprintln!("nao-rs-sim: USB function {what}");
    }
}

/// Opens the connection and claims interface 0 (the host configured the
/// device): a new session of the body.
fn enable(shared: &Shared, link: &mut HostCable) {
    let mut out = Vec::with_capacity(64);
    if link.open {
        disable(shared, link);
    }
    shared.device().connected();
    let mut open = [OP_OPEN, 0, 0, 0, 0];
    open[1..3].copy_from_slice(&VENDOR_ID.to_le_bytes());
    open[3..5].copy_from_slice(&PRODUCT_ID.to_le_bytes());
    shared.request(&mut link.conn, &open, &mut out);
    shared.request(&mut link.conn, &[OP_CLAIM_INTERFACE, INTERFACE], &mut out);
    link.open = true;
}

/// Closes the connection (its claim released, the client disconnected).
fn disable(shared: &Shared, link: &mut HostCable) {
    if link.open {
        shared.device().disconnected(&mut link.conn);
        link.open = false;
    }
}

/// The control request in the socket's encoding (without data).
fn control_request(op: u8, r: &CtrlReq) -> Vec<u8> {
    let mut req = Vec::with_capacity(16);
    req.extend_from_slice(&[op, r.request_type, r.request]);
    req.extend_from_slice(&r.value.to_le_bytes());
    req.extend_from_slice(&r.index.to_le_bytes());
    req
}

/// Endpoint 0: the function's events and the vendor control requests.
fn serve_ep0(
    mut custom: Custom,
    shared: &Shared,
    link: &Mutex<HostCable>,
    dir: &Path,
    quiet: bool,
) -> Result<(), String> {
    let mut out = Vec::with_capacity(MAX_FRAME_LEN + 8);
    let mut data = vec![0u8; usize::from(u16::MAX)];
    loop {
        let event = custom
            .event()
            .map_err(|e| format!("FunctionFS {}: reading ep0 failed: {e}", dir.display()))?;
        match event {
            Event::Enable => {
                note(
                    quiet,
                    "enabled (the host configured the device): a new session",
                );
                enable(shared, &mut lock(link));
            }
            Event::Disable => {
                note(quiet, "disabled (reset or unconfigured)");
                disable(shared, &mut lock(link));
            }
            Event::Unbind => {
                note(quiet, "unbound from the UDC (unplugged)");
                disable(shared, &mut lock(link));
            }
            Event::Bind => note(quiet, "bound to the UDC (plugged in)"),
            Event::SetupDeviceToHost(sender) => {
                let mut req = control_request(OP_CONTROL_IN, sender.ctrl_req());
                req.extend_from_slice(&sender.ctrl_req().length.to_le_bytes());
                shared.request(&mut lock(link).conn, &req, &mut out);
                let r = match out.split_first() {
                    Some((&ST_OK, answer)) => sender.send(answer).map(|_| ()),
                    _ => sender.halt(),
                };
                if let Err(e) = r {
                    eprintln!("nao-rs-sim: control IN on {}: {e}", dir.display());
                }
            }
            Event::SetupHostToDevice(receiver) => {
                let r = receiver.ctrl_req().clone();
                if !Device::knows_control_out(r.request_type, r.request) {
                    let _ = receiver.halt();
                    continue;
                }
                let n = usize::from(r.length).min(data.len());
                match receiver.recv(&mut data[..n]) {
                    Ok(got) => {
                        let mut req = control_request(OP_CONTROL_OUT, &r);
                        req.extend_from_slice(&data[..got]);
                        shared.request(&mut lock(link).conn, &req, &mut out);
                    }
                    Err(e) => eprintln!("nao-rs-sim: control OUT on {}: {e}", dir.display()),
                }
            }
            _ => {}
        }
    }
}

/// Keeps bulk OUT's reads queued (`OUT_QUEUE`): the kernel completes the
/// host's write even while this thread is busy or not scheduled.
fn refill(rx: &mut EndpointReceiver) {
    while rx.is_ready() {
        // One frame is at most one packet (512 bytes at high speed): a
        // buffer of exactly that size ends every transfer without a ZLP.
        if rx.try_recv(BytesMut::with_capacity(MAX_FRAME_LEN)).is_err() {
            break;
        }
    }
}

/// The bulk endpoints: each frame received is stepped by the body; its
/// answer, if any, is queued on bulk IN. Reads are always queued on bulk
/// OUT (the host's next write never waits for us), and an answer the host
/// has not taken within [`WITHDRAW`] is withdrawn: the host gave up on
/// it, and the next read (the next frame's, or a new process's start-up
/// frame 0) must not take it. The host then sees a timeout, as on the
/// socket. A newer frame withdraws an older answer at once.
fn serve_bulk(
    mut tx: EndpointSender,
    mut rx: EndpointReceiver,
    shared: &Shared,
    link: &Mutex<HostCable>,
) {
    let mut req = Vec::with_capacity(MAX_FRAME_LEN + 2);
    let mut out = Vec::with_capacity(MAX_FRAME_LEN + 8);
    let mut bulk_in = [OP_BULK_IN, EP_IN, 0, 0];
    bulk_in[2..4].copy_from_slice(&(BULK_IN_LEN as u16).to_le_bytes());
    // When the queued answer was queued.
    let mut queued: Option<Instant> = None;
    loop {
        refill(&mut rx);
        if rx.is_empty() {
            // Disabled, unbound or reset (ESHUTDOWN): wait for the host.
            std::thread::sleep(RETRY);
            continue;
        }
        let wait = queued.map_or(IDLE, |t| WITHDRAW.saturating_sub(t.elapsed()));
        let data = match rx.fetch_timeout(wait) {
            Ok(Some(d)) => d,
            Ok(None) => {
                if queued.take().is_some() {
                    let _ = tx.try_ready();
                    if !tx.is_empty() {
                        let _ = tx.cancel();
                        shared.device().stats.withdrawn += 1;
                    }
                }
                continue;
            }
            Err(_) => {
                std::thread::sleep(RETRY);
                continue;
            }
        };
        // The next read goes in before this frame is handled.
        refill(&mut rx);
        let answer = {
            let mut l = lock(link);
            if !l.open {
                continue;
            }
            req.clear();
            req.extend_from_slice(&[OP_BULK_OUT, EP_OUT]);
            req.extend_from_slice(&data);
            shared.request(&mut l.conn, &req, &mut out);
            shared.request(&mut l.conn, &bulk_in, &mut out);
            match out.split_first() {
                Some((&ST_OK, answer)) => Some(Bytes::copy_from_slice(answer)),
                _ => None,
            }
        };
        if queued.take().is_some() {
            let _ = tx.try_ready();
            if !tx.is_empty() {
                let _ = tx.cancel();
                shared.device().stats.withdrawn += 1;
            }
        }
        if let Some(a) = answer {
            match tx.try_send(a) {
                Ok(()) => queued = Some(Instant::now()),
                Err(e) => {
                    let _ = tx.cancel();
                    eprintln!("nao-rs-sim: queueing an answer on bulk IN failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The translation from USB events to the device's calls, without a
    //! kernel (the kernel path is the virtual head's: scripts/vhead.sh).
    use super::*;
    use crate::body::BodyConfig;
    use crate::device::CHEST_VERSION;
    use nao_wire::protocol::frame::FrameWriter;
    use nao_wire::protocol::tables::{
        REQUEST_TYPE_IN, REQUEST_TYPE_OUT, REQ_CLIENT_STATE, REQ_START, REQ_VERSION, SYNC_ANSWER,
    };

    fn enabled() -> (Arc<Shared>, HostCable) {
        let cfg = BodyConfig::default();
        let prefs = crate::prefs::build(crate::prefs::DEFAULT_BODY_ID, &cfg.zeros);
        let shared = Shared::new(Device::new(cfg, prefs), None).unwrap();
        let mut link = HostCable {
            conn: Conn::new(1, 0),
            open: false,
        };
        enable(&shared, &mut link);
        (shared, link)
    }

    fn control_in(shared: &Shared, link: &mut HostCable, request: u8, length: u16) -> Vec<u8> {
        let r = CtrlReq {
            request_type: REQUEST_TYPE_IN,
            request,
            value: 0,
            index: 0,
            length,
        };
        let mut req = control_request(OP_CONTROL_IN, &r);
        req.extend_from_slice(&r.length.to_le_bytes());
        let mut out = Vec::new();
        shared.request(&mut link.conn, &req, &mut out);
        out
    }

    #[test]
    fn an_enabled_function_answers_the_vendor_requests_of_the_socket_device() {
        let (shared, mut link) = enabled();
        assert_eq!(
            shared.device().holder_pid(),
            Some(0),
            "enable claims interface 0"
        );
        let out = control_in(&shared, &mut link, REQ_VERSION, 4);
        assert_eq!(out[0], ST_OK);
        assert_eq!(out[1..], CHEST_VERSION);
        // An unknown request is not answered (the front end stalls it).
        assert_ne!(control_in(&shared, &mut link, 0x7f, 4)[0], ST_OK);
    }

    #[test]
    fn only_the_boards_control_out_requests_are_acknowledged() {
        assert!(Device::knows_control_out(REQUEST_TYPE_OUT, REQ_START));
        assert!(Device::knows_control_out(
            REQUEST_TYPE_OUT,
            REQ_CLIENT_STATE
        ));
        assert!(!Device::knows_control_out(REQUEST_TYPE_OUT, 0x7f));
        assert!(!Device::knows_control_out(REQUEST_TYPE_IN, REQ_START));
    }

    #[test]
    fn a_frame_on_bulk_out_is_answered_and_a_disabled_function_answers_nothing() {
        let (shared, mut link) = enabled();
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::frame(&mut buf, 7).unwrap();
        w.push(0x04, 0x01, &[]).unwrap();
        let n = w.finish();
        let mut req = vec![OP_BULK_OUT, EP_OUT];
        req.extend_from_slice(&buf[..n]);
        let mut out = Vec::new();
        let outcome = shared.request(&mut link.conn, &req, &mut out);
        assert_eq!(outcome.frame.map(|f| f.seq), Some(7));
        let bulk_in = [OP_BULK_IN, EP_IN, 0x00, 0x02];
        shared.request(&mut link.conn, &bulk_in, &mut out);
        assert_eq!(out[0], ST_OK);
        assert_eq!(
            out[1], SYNC_ANSWER,
            "the answer starts with the answer sync"
        );
        disable(&shared, &mut link);
        assert_eq!(
            shared.device().holder_pid(),
            None,
            "disable releases the claim"
        );
        shared.request(&mut link.conn, &req, &mut out);
        assert_ne!(out[0], ST_OK, "a closed connection is served nothing");
    }
}
