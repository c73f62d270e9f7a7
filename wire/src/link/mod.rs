//! Links: the USB calls of the recording format (`docs/recording.md`) as
//! one value, [`Call`], and the [`Link`] trait that performs them.
//!
//! A link implements one method, [`Link::call`], as one match over the
//! calls; the named methods (`open`, `bulk_in`, ...) are provided on top.
//! Four implementations stand behind this trait: `usb` (the real chest board
//! through `rusb`, behind the default `usb` feature), [`sim`] (the virtual
//! robot over a Unix socket), the replay's `ReplayLink` (a recording's
//! answers, checking every call, behind [`crate::replay`]) and
//! [`crate::recording::record_link`] (any link, writing a recording).
//!
//! A failed call returns a [`LinkError`], a `Copy` kind; the words that say
//! what and why stay in the link, behind [`Link::detail`].

use core::fmt;

pub mod codec;
pub mod sim;
#[cfg(feature = "usb")]
pub mod usb;

/// The chest board's USB vendor id.
pub const VENDOR_ID: u16 = 0xffff;
/// The chest board's USB product id.
pub const PRODUCT_ID: u16 = 0x0006;

/// What kind of failure a USB call met. The first three are the errors a
/// recording holds for a `bulk_in` (`!timeout`, `!pipe`, `!nodev`).
///
/// The kind is `Copy` so the cycle can pass it on without allocating; the
/// message of the last failure is [`Link::detail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// The transfer timed out.
    Timeout,
    /// The endpoint stalled.
    Pipe,
    /// The device is gone (unplugged, or never there).
    NoDevice,
    /// Another process holds the interface (the guard, or another runtime).
    Busy,
    /// The replay's recording expected another call.
    Mismatch,
    /// Anything else (a short write, a bad argument, a protocol error).
    Other,
}

impl LinkError {
    /// The recording's word for a failed `bulk_in` (`!timeout`, `!pipe`,
    /// `!nodev`); the format has no other, so every other kind is `!pipe`
    /// (the runtime counts any failed read as a failed exchange).
    pub(crate) fn recorded(self) -> &'static str {
        match self {
            LinkError::Timeout => "!timeout",
            LinkError::NoDevice => "!nodev",
            _ => "!pipe",
        }
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkError::Timeout => "USB transfer timed out",
            LinkError::Pipe => "USB endpoint stalled (pipe error)",
            LinkError::NoDevice => {
                "no chest board (USB ffff:0006) found: it is unplugged, off, or not visible here \
                 (`lsusb -d ffff:0006` lists it when present)"
            }
            LinkError::Busy => "chest board busy: another process holds interface 0",
            LinkError::Mismatch => "replay mismatch: the recording expected another call",
            LinkError::Other => "USB call failed",
        })
    }
}

impl std::error::Error for LinkError {}

/// One USB call, as a recording line names it (without the answer). The
/// data of an OUT call is borrowed; the answer of an IN call goes into the
/// caller's buffer (see [`Link::call`]), so a call allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'a> {
    /// `open ffff:0006`
    Open {
        /// idVendor.
        vendor: u16,
        /// idProduct.
        product: u16,
    },
    /// `set_configuration <n>`
    SetConfiguration(u8),
    /// `claim_interface <n>`
    ClaimInterface(u8),
    /// `close`: release the interface and close the device. Never fails.
    Close,
    /// `control_out <bmRequestType> <bRequest> <wValue> <wIndex> <data>`
    ControlOut {
        /// The setup packet.
        setup: Setup,
        /// The data stage.
        data: &'a [u8],
    },
    /// `control_in <bmRequestType> <bRequest> <wValue> <wIndex> <wLength>`
    ControlIn {
        /// The setup packet.
        setup: Setup,
        /// wLength.
        length: u16,
    },
    /// `bulk_out <ep> <data>`
    BulkOut {
        /// The OUT endpoint.
        endpoint: u8,
        /// The bytes sent.
        data: &'a [u8],
    },
    /// `bulk_in <ep> <buffer length>`
    BulkIn {
        /// The IN endpoint.
        endpoint: u8,
        /// The buffer length.
        length: usize,
    },
}

/// The setup packet of a control transfer, without wLength.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// bmRequestType (bit 7: direction, set for IN).
    pub request_type: u8,
    /// bRequest.
    pub request: u8,
    /// wValue.
    pub value: u16,
    /// wIndex.
    pub index: u16,
}

impl Call<'_> {
    /// How many answer bytes the call reads (wLength or the buffer length;
    /// 0 for the calls that read nothing).
    pub(crate) fn answer_len(&self) -> usize {
        match *self {
            Call::ControlIn { length, .. } => length.into(),
            Call::BulkIn { length, .. } => length,
            _ => 0,
        }
    }

    /// The data the call sends (empty for the calls that send none).
    pub(crate) fn data(&self) -> &[u8] {
        match *self {
            Call::ControlOut { data, .. } | Call::BulkOut { data, .. } => data,
            _ => &[],
        }
    }

    /// The call's name as a recording line starts (`bulk_in`, ...).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Call::Open { .. } => "open",
            Call::SetConfiguration(_) => "set_configuration",
            Call::ClaimInterface(_) => "claim_interface",
            Call::Close => "close",
            Call::ControlOut { .. } => "control_out",
            Call::ControlIn { .. } => "control_in",
            Call::BulkOut { .. } => "bulk_out",
            Call::BulkIn { .. } => "bulk_in",
        }
    }
}

/// Bytes as the recording writes them: lowercase hex, `-` for none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        if self.0.is_empty() {
            return f.write_str("-");
        }
        let mut pair = [0u8; 64];
        for chunk in self.0.chunks(32) {
            for (i, b) in chunk.iter().enumerate() {
                pair[2 * i] = DIGITS[usize::from(b >> 4)];
                pair[2 * i + 1] = DIGITS[usize::from(b & 15)];
            }
            // The digits are ASCII.
            f.write_str(core::str::from_utf8(&pair[..2 * chunk.len()]).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

/// The call in the recording's line syntax, without the answer of an IN
/// call: `bulk_in 81 512`, `control_out 41 01 0000 0000 -`, ...
impl fmt::Display for Call<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match *self {
            Call::Open { vendor, product } => write!(f, " {vendor:04x}:{product:04x}"),
            Call::SetConfiguration(n) | Call::ClaimInterface(n) => write!(f, " {n}"),
            Call::Close => Ok(()),
            Call::ControlOut { setup, data } => write!(f, " {setup} {}", Hex(data)),
            Call::ControlIn { setup, length } => write!(f, " {setup} {length}"),
            Call::BulkOut { endpoint, data } => write!(f, " {endpoint:02x} {}", Hex(data)),
            Call::BulkIn { endpoint, length } => write!(f, " {endpoint:02x} {length}"),
        }
    }
}

/// `<bmRequestType> <bRequest> <wValue> <wIndex>` in hex.
impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Setup {
            request_type,
            request,
            value,
            index,
        } = *self;
        write!(
            f,
            "{request_type:02x} {request:02x} {value:04x} {index:04x}"
        )
    }
}

/// The answer of an IN call as a recording line ends: the bytes in hex, or
/// the error word of a failed `bulk_in` (see [`LinkError::recorded`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer<'a>(pub Result<&'a [u8], LinkError>);

impl fmt::Display for Answer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Ok(a) => Hex(a).fmt(f),
            Err(e) => f.write_str(e.recorded()),
        }
    }
}

/// The part of `answer` an IN call reads into: its first
/// [`Call::answer_len`] bytes, or [`LinkError::Other`] when the buffer is
/// shorter (a caller's bug; [`Link`]'s provided methods never make it).
pub(crate) fn answer_buf<'b>(
    call: &Call<'_>,
    answer: &'b mut [u8],
) -> Result<&'b mut [u8], LinkError> {
    answer.get_mut(..call.answer_len()).ok_or(LinkError::Other)
}

/// The USB calls the runtime makes, shaped like the lines of a recording.
///
/// An implementation writes [`Link::call`] only; the named methods build
/// the [`Call`] and pass it. Every call returns at once or after the
/// timeout of `docs/protocol.md` (control 100 ms, bulk 20 ms); none
/// allocates on the cycle path (`bulk_out`, `bulk_in`, `control_out`).
pub trait Link: Send {
    /// Performs `call`. An IN call (`control_in`, `bulk_in`) reads at most
    /// [`Call::answer_len`] bytes into the start of `answer` (at least that
    /// long, or the call fails with [`LinkError::Other`]) and returns how
    /// many it read; an OUT call returns how many bytes it sent; the others
    /// return 0.
    ///
    /// # Errors
    ///
    /// The [`LinkError`] the call met: the board's (a timeout, a stall, no
    /// device, the interface busy), the replay's [`LinkError::Mismatch`],
    /// or [`LinkError::Other`] (an `answer` shorter than the call reads,
    /// anything else); [`Link::detail`] may say more.
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError>;

    /// The message of the last failure that has more to say than its kind
    /// (`no chest board (USB ffff:0006) found: ...`, a replay mismatch), if
    /// the link keeps one.
    fn detail(&self) -> Option<&str> {
        None
    }

    /// `open ffff:0006`
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        self.call(Call::Open { vendor, product }, &mut []).map(drop)
    }
    /// `set_configuration <n>`
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError> {
        self.call(Call::SetConfiguration(config), &mut []).map(drop)
    }
    /// `claim_interface <n>`
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError> {
        self.call(Call::ClaimInterface(iface), &mut []).map(drop)
    }
    /// `close`: release the interface and close the device. Never fails.
    fn close(&mut self) {
        let _ = self.call(Call::Close, &mut []);
    }
    /// `control_out <bmRequestType> <bRequest> <wValue> <wIndex> <data>`
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError> {
        let setup = Setup {
            request_type,
            request,
            value,
            index,
        };
        self.call(Call::ControlOut { setup, data }, &mut [])
    }
    /// `control_in ... <wLength>`: `buf.len()` is wLength (at most 65535);
    /// returns how many bytes the device gave.
    ///
    /// # Errors
    ///
    /// [`LinkError::Other`] for a `buf` longer than 65535 bytes (no call is
    /// made); otherwise what [`Link::call`] returns for the call.
    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError> {
        let length = u16::try_from(buf.len()).map_err(|_| LinkError::Other)?;
        let setup = Setup {
            request_type,
            request,
            value,
            index,
        };
        self.call(Call::ControlIn { setup, length }, buf)
    }
    /// `bulk_out <ep> <data>`
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError> {
        self.call(Call::BulkOut { endpoint, data }, &mut [])
    }
    /// `bulk_in <ep> <buffer length>`: `buf.len()` is the buffer length;
    /// returns how many bytes were read.
    ///
    /// # Errors
    ///
    /// What [`Link::call`] returns for the call.
    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError> {
        let length = buf.len();
        self.call(Call::BulkIn { endpoint, length }, buf)
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        (**self).call(call, answer)
    }
    fn detail(&self) -> Option<&str> {
        (**self).detail()
    }
}
