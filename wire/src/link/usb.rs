//! The real chest board over USB, through `rusb` (libusb, vendored: built
//! from source by the `rusb` crate, so a fresh machine needs only a C
//! compiler).
//!
//! Spec section 1: device `ffff:0006`, configuration 1, interface 0, bulk OUT
//! `0x02`, bulk IN `0x81`; timeouts: control 100 ms, bulk 20 ms. Every call is
//! synchronous and returns at once or after its timeout. This link allocates
//! nothing on the cycle path on success (libusb allocates its own transfer
//! per synchronous call, inside the C library); an unusual error
//! ([`LinkError::Other`]) formats its message into [`Link::detail`].
//!
//! Errors map as: rusb `Timeout` → [`LinkError::Timeout`], `Pipe` →
//! [`LinkError::Pipe`], `NoDevice` / `NotFound` → [`LinkError::NoDevice`],
//! `Busy` → [`LinkError::Busy`], anything else → [`LinkError::Other`]; the
//! message naming the call, the device and the error is [`Link::detail`]. A call on a link that
//! is not open fails with [`LinkError::NoDevice`], so the runtime's reconnect
//! rule handles it like an unplugged board.

use std::time::Duration;

use rusb::{Context, DeviceHandle, UsbContext};

use super::{answer_buf, Call, Link, LinkError, Setup};

/// Timeout of every control transfer (`docs/protocol.md` section 1).
pub(crate) const CONTROL_TIMEOUT: Duration = Duration::from_millis(100);
/// Timeout of every bulk transfer (`docs/protocol.md` section 1).
pub(crate) const BULK_TIMEOUT: Duration = Duration::from_millis(20);

/// The chest board through libusb.
///
/// ```no_run
/// use nao_wire::link::{usb::UsbLink, Link, PRODUCT_ID, VENDOR_ID};
/// let mut link = UsbLink::new();
/// if let Err(e) = link.open(VENDOR_ID, PRODUCT_ID) {
///     eprintln!("{e}: {}", link.detail().unwrap_or(""));
/// }
/// ```
pub struct UsbLink {
    context: Option<Context>,
    handle: Option<DeviceHandle<Context>>,
    claimed: Option<u8>,
    /// Where the device is: (vendor, product, bus, address).
    at: (u16, u16, u8, u8),
    last_error: Option<String>,
}

impl Default for UsbLink {
    fn default() -> Self {
        Self::new()
    }
}

impl UsbLink {
    /// A closed link; [`Link::open`] finds and opens the device.
    pub fn new() -> Self {
        UsbLink {
            context: None,
            handle: None,
            claimed: None,
            at: (0, 0, 0, 0),
            last_error: None,
        }
    }

    fn fail(&mut self, kind: LinkError, message: String) -> LinkError {
        self.last_error = Some(message);
        kind
    }

    fn handle(&self) -> Result<&DeviceHandle<Context>, LinkError> {
        self.handle.as_ref().ok_or(LinkError::NoDevice)
    }

    /// Maps a rusb error of call `what` to a [`LinkError`], keeping the
    /// message of an unusual one.
    fn map(&mut self, e: rusb::Error, what: &str) -> LinkError {
        match e {
            rusb::Error::Timeout => LinkError::Timeout,
            rusb::Error::Pipe => LinkError::Pipe,
            rusb::Error::NoDevice | rusb::Error::NotFound => LinkError::NoDevice,
            rusb::Error::Busy => LinkError::Busy,
            other => {
                let (v, p, bus, addr) = self.at;
                self.fail(
                    LinkError::Other,
                    format!(
                        "USB {what} on {v:04x}:{p:04x} (bus {bus:03} device {addr:03}) failed: {other}"
                    ),
                )
            }
        }
    }
}

impl Link for UsbLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        match call {
            Call::Open { vendor, product } => self.open_device(vendor, product).map(|()| 0),
            Call::SetConfiguration(n) => self.configure(n).map(|()| 0),
            Call::ClaimInterface(n) => self.claim(n).map(|()| 0),
            Call::Close => {
                self.close_device();
                Ok(0)
            }
            Call::ControlOut { setup, data } => self.write_control(setup, data),
            Call::ControlIn { setup, .. } => {
                let buf = answer_buf(&call, answer)?;
                self.read_control(setup, buf)
            }
            Call::BulkOut { endpoint, data } => {
                let r = self.handle()?.write_bulk(endpoint, data, BULK_TIMEOUT);
                r.map_err(|e| self.map(e, "bulk_out"))
            }
            Call::BulkIn { endpoint, .. } => {
                let buf = answer_buf(&call, answer)?;
                let r = self.handle()?.read_bulk(endpoint, buf, BULK_TIMEOUT);
                r.map_err(|e| self.map(e, "bulk_in"))
            }
        }
    }

    fn detail(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

impl UsbLink {
    fn open_device(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        self.close_device();
        let id = format!("{vendor:04x}:{product:04x}");
        if self.context.is_none() {
            match Context::new() {
                Ok(c) => self.context = Some(c),
                Err(e) => {
                    return Err(self.fail(
                        LinkError::NoDevice,
                        format!(
                            "no chest board (USB {id}) found: libusb could not start ({e}); \
                             is /dev/bus/usb there (in a container: pass the USB bus in)? \
                             A process that locked its memory (mlockall) with a small \
                             RLIMIT_MEMLOCK cannot map libusb's buffers either: run with \
                             `LimitMEMLOCK=infinity` (the units of config/ have it) or \
                             `ulimit -l unlimited`"
                        ),
                    ))
                }
            }
        }
        let Some(context) = self.context.as_ref() else {
            return Err(LinkError::NoDevice);
        };
        let devices = match context.devices() {
            Ok(d) => d,
            Err(e) => {
                return Err(self.fail(
                    LinkError::NoDevice,
                    format!("no chest board (USB {id}) found: cannot list USB devices ({e})"),
                ))
            }
        };
        let found = devices.iter().find(|d| {
            d.device_descriptor()
                .is_ok_and(|desc| desc.vendor_id() == vendor && desc.product_id() == product)
        });
        let Some(device) = found else {
            return Err(self.fail(
                LinkError::NoDevice,
                format!(
                    "no chest board (USB {id}) found: is the robot on, and does `lsusb -d {id}` list it? \
                     ({} other USB devices seen)",
                    devices.len()
                ),
            ));
        };
        let (bus, addr) = (device.bus_number(), device.address());
        self.at = (vendor, product, bus, addr);
        match device.open() {
            Ok(h) => {
                // The chest board has no kernel driver; where libusb cannot
                // detach one (not Linux), claiming still works.
                let _ = h.set_auto_detach_kernel_driver(true);
                self.handle = Some(h);
                self.last_error = None;
                Ok(())
            }
            Err(rusb::Error::Access) => Err(self.fail(
                LinkError::Other,
                format!(
                    "cannot open the chest board (USB {id}, bus {bus:03} device {addr:03}): permission \
                     denied; run as root or add a udev rule giving your user access to {id}"
                ),
            )),
            Err(e) => {
                let kind = self.map(e, "open");
                Err(self.fail(kind, format!("cannot open the chest board (USB {id}): {e}")))
            }
        }
    }

    fn configure(&mut self, config: u8) -> Result<(), LinkError> {
        let r = self.handle()?.set_active_configuration(config);
        r.map_err(|e| {
            let kind = self.map(e, "set_configuration");
            self.fail(
                kind,
                format!("set_configuration {config} on the chest board failed: {e}"),
            )
        })
    }

    fn claim(&mut self, iface: u8) -> Result<(), LinkError> {
        let r = self.handle()?.claim_interface(iface);
        match r {
            Ok(()) => {
                self.claimed = Some(iface);
                Ok(())
            }
            Err(e) => {
                let kind = self.map(e, "claim_interface");
                Err(self.fail(
                    kind,
                    format!(
                        "claim_interface {iface} on the chest board failed: {e} (busy: another \
                         process, the guard or another runtime, holds it)"
                    ),
                ))
            }
        }
    }

    fn close_device(&mut self) {
        if let (Some(h), Some(iface)) = (self.handle.as_ref(), self.claimed.take()) {
            let _ = h.release_interface(iface);
        }
        self.handle = None;
    }

    fn write_control(&mut self, s: Setup, data: &[u8]) -> Result<usize, LinkError> {
        if data.len() > usize::from(u16::MAX) || s.request_type & 0x80 != 0 {
            return Err(self.fail(
                LinkError::Other,
                format!(
                    "control_out with bmRequestType {:02x} and {} bytes: needs direction bit 0x80 \
                     clear and at most 65535 bytes",
                    s.request_type,
                    data.len()
                ),
            ));
        }
        let r = self.handle()?.write_control(
            s.request_type,
            s.request,
            s.value,
            s.index,
            data,
            CONTROL_TIMEOUT,
        );
        r.map_err(|e| self.map(e, "control_out"))
    }

    fn read_control(&mut self, s: Setup, buf: &mut [u8]) -> Result<usize, LinkError> {
        if s.request_type & 0x80 == 0 {
            return Err(self.fail(
                LinkError::Other,
                format!(
                    "control_in with bmRequestType {:02x}: needs direction bit 0x80 set",
                    s.request_type
                ),
            ));
        }
        let r = self.handle()?.read_control(
            s.request_type,
            s.request,
            s.value,
            s.index,
            buf,
            CONTROL_TIMEOUT,
        );
        r.map_err(|e| self.map(e, "control_in"))
    }
}

impl Drop for UsbLink {
    fn drop(&mut self) {
        self.close_device();
    }
}
