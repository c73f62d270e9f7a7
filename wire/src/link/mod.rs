//! Links: the USB calls of `spec/recording-format.md`, one method each.
//!
//! Three implementations stand behind this trait: [`usb`] (the real chest
//! board through `rusb`), [`sim`] (the virtual robot over a Unix socket) and
//! [`replay`] (a recording's answers, checking every call).

use std::fmt;

pub mod record;
pub mod replay;
pub mod sim;
pub mod usb;

/// The chest board's USB vendor id.
pub const VENDOR_ID: u16 = 0xffff;
/// The chest board's USB product id.
pub const PRODUCT_ID: u16 = 0x0006;

/// Why a USB call failed. The first three are the errors a recording can hold
/// for a `bulk_in` (`!timeout`, `!pipe`, `!nodev`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// The transfer timed out.
    Timeout,
    /// The endpoint stalled.
    Pipe,
    /// The device is gone (unplugged, or never there).
    NoDevice,
    /// Another process holds the interface (the guard, or another runtime).
    Busy,
    /// The replay's recording expected another call (see the message).
    Mismatch(String),
    /// Anything else, with a message that names what and why.
    Other(String),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Timeout => write!(f, "USB transfer timed out"),
            LinkError::Pipe => write!(f, "USB endpoint stalled (pipe error)"),
            LinkError::NoDevice => write!(
                f,
                "no chest board (USB ffff:0006) found: it is unplugged, off, or not visible here \
                 (`lsusb -d ffff:0006` lists it when present)"
            ),
            LinkError::Busy => write!(f, "chest board busy: another process holds interface 0"),
            LinkError::Mismatch(m) => write!(f, "replay mismatch: {m}"),
            LinkError::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for LinkError {}

/// The USB calls the runtime makes, shaped like the lines of a recording.
///
/// Every method takes `&mut self` and returns at once or after the spec's
/// timeout (control 100 ms, bulk 20 ms); none allocates on the cycle path
/// (`bulk_out`, `bulk_in`, `control_out`).
pub trait Link: Send {
    /// `open ffff:0006`
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError>;
    /// `set_configuration <n>`
    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError>;
    /// `claim_interface <n>`
    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError>;
    /// `close`: release the interface and close the device. Never fails.
    fn close(&mut self);
    /// `control_out <bmRequestType> <bRequest> <wValue> <wIndex> <data>`
    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError>;
    /// `control_in ... <wLength> <answer>`: `buf.len()` is wLength; returns
    /// how many bytes the device gave.
    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError>;
    /// `bulk_out <ep> <data>`
    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError>;
    /// `bulk_in <ep> <buffer length> <answer>`: `buf.len()` is the buffer
    /// length; returns how many bytes were read.
    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError>;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        (**self).open(vendor, product)
    }
    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError> {
        (**self).set_configuration(config)
    }
    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError> {
        (**self).claim_interface(iface)
    }
    fn close(&mut self) {
        (**self).close()
    }
    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError> {
        (**self).control_out(request_type, request, value, index, data)
    }
    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError> {
        (**self).control_in(request_type, request, value, index, buf)
    }
    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError> {
        (**self).bulk_out(endpoint, data)
    }
    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError> {
        (**self).bulk_in(endpoint, buf)
    }
}
