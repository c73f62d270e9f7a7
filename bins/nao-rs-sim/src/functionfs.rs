//! The second front end of the one virtual body: the chest board as a real
//! USB device of the kernel, through FunctionFS (`nao-rs-sim --functionfs
//! DIR`). A host on the other side of the UDC (on one machine: `dummy_hcd`)
//! sees USB `ffff:0006` and talks to it with `--link usb` (libusb), exactly
//! as to the chest board.
//!
//! Every request is translated to the USB call it is (`nao_wire::Call`,
//! as the Unix socket's requests decode) and handled by the same [`Device`]
//! through [`Shared::call`], so the body, the faults, the trace and the control
//! socket are the ones of the socket front end:
//!
//! - the function enabled (the host's `set_configuration`) opens one
//!   connection and claims interface 0 (a new session of the body, as a new
//!   claim on the socket); disabled, unbound or reset, it is closed;
//! - a vendor control request (bmRequestType 0x40/0xc0, recipient device:
//!   the descriptors set `FUNCTIONFS_ALL_CTRL_RECIP`) is a control call;
//!   the ones the device refuses are stalled, as the socket's `Pipe`;
//! - a bulk OUT transfer is a frame; the answer, if the board has one (no
//!   drop, no stall), is queued on bulk IN for the host's read; it stays
//!   there until the host reads it, a newer frame arrives or a new session
//!   begins, when it is withdrawn: no later read takes a stale answer (the
//!   socket's "pending answer" rule; counted as `withdrawn` in `status`).
//!
//! What differs: the kernel, not the device, keeps the claim exclusive
//! (usbfs), so the trace's `peer_pid` is 0 (the device cannot see the host's
//! process), and `ctl unplug`/`replug` only refuse service: a real unplug
//! is an unbind of the gadget from its UDC (see `docs/virtual-head.md`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nao_wire::link::{Call, Setup, PRODUCT_ID, VENDOR_ID};
use nao_wire::protocol::frame::MAX_FRAME_LEN;
use nao_wire::protocol::tables::{BULK_IN_LEN, EP_IN, EP_OUT, INTERFACE};
use usb_gadget::function::custom::{
    CtrlReq, Custom, Endpoint, EndpointDirection, EndpointReceiver, EndpointSender, Event,
    Interface,
};
use usb_gadget::Class;

use crate::device::{Conn, Device, Reply};
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

/// Reads kept queued on bulk OUT.
const OUT_QUEUE: u32 = 2;

/// How long the bulk thread waits for a frame before it looks again.
const IDLE: Duration = Duration::from_secs(1);

/// The one connection of the USB front end: the host side of the cable.
struct HostCable {
    conn: Conn,
    open: bool,
    answer: QueuedAnswer,
    /// Control requests served in this session. Every host starts a
    /// session with control requests (START, VERSION) before its first
    /// frame, so a frame handled while this is 0 was written by the
    /// previous session's host (the kernel completed it before the new
    /// session began; this thread took it later): the body steps it, but
    /// its answer is not queued for the new host to read.
    control_requests: u64,
}

/// The answer queued on bulk IN (the socket device's pending answer).
///
/// The host reads the answer to frame k at the start of cycle k+1 (read,
/// then write: `docs/protocol.md`), about one cycle after it was queued,
/// so an answer is not withdrawn by age: only a newer frame or a new
/// session (the function enabled or disabled) withdraws it. A new session
/// withdraws it on endpoint 0's thread, before that thread answers the new
/// host's first control request, so a restarted process can never read
/// the answer to its predecessor's last frame: its first bulk transfer
/// comes after its control requests.
struct QueuedAnswer {
    /// Bulk IN (`None` in the unit tests, which have no kernel).
    tx: Option<EndpointSender>,
    queued: bool,
}

impl QueuedAnswer {
    /// Withdraws the queued answer, if the host has not taken it.
    fn withdraw(&mut self, shared: &Shared) {
        let Some(tx) = self.tx.as_mut() else { return };
        if std::mem::take(&mut self.queued) {
            let _ = tx.try_ready();
            if !tx.is_empty() {
                let _ = tx.cancel();
                shared.device().stats.withdrawn += 1;
            }
        }
    }

    /// Queues `answer` on bulk IN.
    fn queue(&mut self, answer: Bytes) {
        let Some(tx) = self.tx.as_mut() else { return };
        match tx.try_send(answer) {
            Ok(()) => self.queued = true,
            Err(e) => {
                let _ = tx.cancel();
                eprintln!("nao-rs-sim: queueing an answer on bulk IN failed: {e}");
            }
        }
    }
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
        answer: QueuedAnswer {
            tx: Some(tx),
            queued: false,
        },
        control_requests: 0,
    }));
    {
        let (shared, link) = (Arc::clone(&shared), Arc::clone(&link));
        std::thread::Builder::new()
            .name("sim-bulk".into())
            .spawn(move || serve_bulk(rx, &shared, &link))
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
    let mut none = Vec::new();
    if link.open {
        disable(shared, link);
    }
    link.answer.withdraw(shared);
    link.control_requests = 0;
    shared.device().connected();
    let open = Call::Open {
        vendor: VENDOR_ID,
        product: PRODUCT_ID,
    };
    let _ = shared.call(&mut link.conn, &open, &mut none);
    let _ = shared.call(&mut link.conn, &Call::ClaimInterface(INTERFACE), &mut none);
    link.open = true;
}

/// Closes the connection (its claim released, the client disconnected).
fn disable(shared: &Shared, link: &mut HostCable) {
    link.answer.withdraw(shared);
    if link.open {
        shared.device().disconnected(&mut link.conn);
        link.open = false;
    }
}

/// The setup packet of a control request.
fn setup(r: &CtrlReq) -> Setup {
    Setup {
        request_type: r.request_type,
        request: r.request,
        value: r.value,
        index: r.index,
    }
}

/// How many abandoned-setup errors in a row ep0 survives (at [`RETRY`]
/// apart, about a second) before the front end gives up.
const EP0_RETRIES: u32 = 500;

/// Whether `e` is ep0's answer to a control request the host abandoned:
/// ESRCH (no setup pending any more), EIDRM (the setup was cancelled),
/// EL2HLT (the stall of an unanswered setup), EOVERFLOW (its data stage
/// ended early), EINTR.
fn is_abandoned_setup(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            nix::libc::ESRCH
                | nix::libc::EIDRM
                | nix::libc::EL2HLT
                | nix::libc::EOVERFLOW
                | nix::libc::EINTR
        )
    )
}

/// Endpoint 0: the function's events and the vendor control requests.
fn serve_ep0(
    mut custom: Custom,
    shared: &Shared,
    link: &Mutex<HostCable>,
    dir: &Path,
    quiet: bool,
) -> Result<(), String> {
    let mut answer = Vec::with_capacity(MAX_FRAME_LEN);
    let mut data = vec![0u8; usize::from(u16::MAX)];
    let mut failures = 0u32;
    loop {
        let event = match custom.event() {
            Ok(e) => {
                failures = 0;
                e
            }
            // A control request the host gave up on (its timeout, a new
            // setup) leaves ep0 with no setup to finish: the kernel says
            // so once (ESRCH, EIDRM, EL2HLT) and the next event is good.
            Err(e) if failures < EP0_RETRIES && is_abandoned_setup(&e) => {
                failures += 1;
                eprintln!(
                    "nao-rs-sim: ep0 on {}: {e} (a control request the host abandoned); going on",
                    dir.display()
                );
                std::thread::sleep(RETRY);
                continue;
            }
            Err(e) => {
                return Err(format!(
                    "FunctionFS {}: reading ep0 failed: {e}",
                    dir.display()
                ))
            }
        };
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
                let r = sender.ctrl_req();
                let call = Call::ControlIn {
                    setup: setup(r),
                    length: r.length,
                };
                let r = match serve_control(shared, &mut lock(link), &call, &mut answer) {
                    Ok(n) => sender.send(&answer[..n]).map(|_| ()),
                    Err(_) => sender.halt(),
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
                        let call = Call::ControlOut {
                            setup: setup(&r),
                            data: &data[..got],
                        };
                        let _ = serve_control(shared, &mut lock(link), &call, &mut answer);
                    }
                    Err(e) => eprintln!("nao-rs-sim: control OUT on {}: {e}", dir.display()),
                }
            }
            _ => {}
        }
    }
}

/// A control request of this session's host, answered by the device.
fn serve_control(
    shared: &Shared,
    link: &mut HostCable,
    call: &Call<'_>,
    answer: &mut Vec<u8>,
) -> Reply {
    link.control_requests += 1;
    shared.call(&mut link.conn, call, answer)
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
/// answer, if any, is queued on bulk IN in place of the older one (see
/// [`QueuedAnswer`]). Reads are always queued on bulk OUT (the host's next
/// write never waits for us).
fn serve_bulk(mut rx: EndpointReceiver, shared: &Shared, link: &Mutex<HostCable>) {
    let mut answer = Vec::with_capacity(MAX_FRAME_LEN);
    let bulk_in = Call::BulkIn {
        endpoint: EP_IN,
        length: BULK_IN_LEN,
    };
    loop {
        refill(&mut rx);
        if rx.is_empty() {
            // Disabled, unbound or reset (ESHUTDOWN): wait for the host.
            std::thread::sleep(RETRY);
            continue;
        }
        let data = match rx.fetch_timeout(IDLE) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(_) => {
                std::thread::sleep(RETRY);
                continue;
            }
        };
        // The next read goes in before this frame is handled.
        refill(&mut rx);
        let mut l = lock(link);
        if !l.open {
            continue;
        }
        let frame = Call::BulkOut {
            endpoint: EP_OUT,
            data: &data,
        };
        let _ = shared.call(&mut l.conn, &frame, &mut answer);
        let read = shared.call(&mut l.conn, &bulk_in, &mut answer);
        l.answer.withdraw(shared);
        match read {
            Ok(n) if l.control_requests > 0 => l.answer.queue(Bytes::copy_from_slice(&answer[..n])),
            _ => {}
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
    use nao_wire::protocol::tables::VendorRequest;
    use nao_wire::LinkError;

    fn enabled() -> (Arc<Shared>, HostCable) {
        let cfg = BodyConfig::default();
        let prefs = crate::prefs::build(crate::prefs::DEFAULT_BODY_ID, &cfg.zeros);
        let shared = Shared::new(Device::new(cfg, prefs), None).unwrap();
        let mut link = HostCable {
            conn: Conn::new(1, 0),
            open: false,
            answer: QueuedAnswer {
                tx: None,
                queued: false,
            },
            control_requests: 0,
        };
        enable(&shared, &mut link);
        (shared, link)
    }

    fn control_in(
        shared: &Shared,
        link: &mut HostCable,
        request: u8,
        length: u16,
    ) -> Result<Vec<u8>, LinkError> {
        let r = CtrlReq {
            request_type: 0xc0,
            request,
            value: 0,
            index: 0,
            length,
        };
        let call = Call::ControlIn {
            setup: setup(&r),
            length: r.length,
        };
        let mut answer = Vec::new();
        let n = serve_control(shared, link, &call, &mut answer).map_err(|(e, _)| e)?;
        Ok(answer[..n].to_vec())
    }

    #[test]
    fn an_enabled_function_answers_the_vendor_requests_of_the_socket_device() {
        let (shared, mut link) = enabled();
        assert_eq!(
            shared.device().holder_pid(),
            Some(0),
            "enable claims interface 0"
        );
        let out = control_in(&shared, &mut link, VendorRequest::Version.into(), 4);
        assert_eq!(out, Ok(CHEST_VERSION.to_vec()));
        // An unknown request is not answered (the front end stalls it).
        assert!(control_in(&shared, &mut link, 0x7f, 4).is_err());
    }

    #[test]
    fn an_abandoned_control_request_does_not_end_the_front_end_but_a_lost_ep0_does() {
        for errno in [
            nix::libc::ESRCH,
            nix::libc::EIDRM,
            nix::libc::EL2HLT,
            nix::libc::EOVERFLOW,
        ] {
            assert!(is_abandoned_setup(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
        for errno in [nix::libc::EBADF, nix::libc::ENODEV, nix::libc::EBADFD] {
            assert!(!is_abandoned_setup(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
    }

    #[test]
    fn only_the_boards_control_out_requests_are_acknowledged() {
        let (start, client_state) = (VendorRequest::Start, VendorRequest::ClientState);
        // bmRequestType 0x40: vendor, host to device; 0xc0: device to host.
        assert!(Device::knows_control_out(0x40, start.into()));
        assert!(Device::knows_control_out(0x40, client_state.into()));
        assert!(!Device::knows_control_out(0x40, 0x7f));
        assert!(!Device::knows_control_out(0xc0, start.into()));
    }

    #[test]
    fn a_frame_on_bulk_out_is_answered_and_a_disabled_function_answers_nothing() {
        let (shared, mut link) = enabled();
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::frame(&mut buf, 7).unwrap();
        w.push(0x04, 0x01, &[]).unwrap();
        let n = w.finish();
        let frame = Call::BulkOut {
            endpoint: EP_OUT,
            data: &buf[..n],
        };
        let mut answer = Vec::new();
        let outcome = shared
            .device()
            .call(&mut link.conn, &frame, 0, &mut answer)
            .1;
        assert_eq!(outcome.frame.map(|f| f.seq), Some(7));
        let bulk_in = Call::BulkIn {
            endpoint: EP_IN,
            length: 512,
        };
        assert!(shared.call(&mut link.conn, &bulk_in, &mut answer).is_ok());
        assert_eq!(
            answer[0], 0x5a,
            "the answer starts with the answer sync (docs/protocol.md section 5)"
        );
        disable(&shared, &mut link);
        assert_eq!(
            shared.device().holder_pid(),
            None,
            "disable releases the claim"
        );
        assert!(
            shared.call(&mut link.conn, &frame, &mut answer).is_err(),
            "a closed connection is served nothing"
        );
    }
}
