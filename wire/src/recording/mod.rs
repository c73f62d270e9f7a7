//! The recording format of `docs/recording.md`, both ways: the reader
//! (every malformed line rejected with its number and the reason) and the
//! writer.
//!
//! The types below are the contract between the reader, the writer, the
//! replay and the recording link; keep them stable.

use core::fmt;

use crate::command::{Command, Joint};
use crate::link::{Answer, Call, LinkError, Setup};
use crate::protocol::bringup::{BringUpLimits, Jog, Limit};
use deathswitch::Reason;

mod reader;
pub mod record_link;
pub(crate) mod replay_link;
mod writer;

pub(crate) use reader::HEADER;
pub use reader::{parse, parse_bytes, read_file, ParseError};
pub use replay_link::Mismatch;
pub use writer::{to_text, RecordingWriter};

/// The largest `t_ms` of a `cycle` line: `t_ms * 1_000_000`, the time in
/// ns, fits a u64.
pub(crate) const MAX_T_MS: u64 = u64::MAX / 1_000_000;

/// The word of a `trip` line whose reason is not known.
pub(crate) const UNKNOWN_REASON: &str = "unknown";

/// One USB call line: the call with its data and, for `control_in` and
/// `bulk_in`, its recorded answer; the `Display` is the line's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
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
    /// `close`
    Close,
    /// `control_out <bmRequestType> <bRequest> <wValue> <wIndex> <data>`
    ControlOut {
        /// The setup packet.
        setup: Setup,
        /// The data stage.
        data: Vec<u8>,
    },
    /// `control_in <bmRequestType> <bRequest> <wValue> <wIndex> <wLength> <answer>`
    ControlIn {
        /// The setup packet.
        setup: Setup,
        /// wLength.
        length: u16,
        /// The bytes the board answered (at most `length`).
        answer: Vec<u8>,
    },
    /// `bulk_out <ep> <data>`
    BulkOut {
        /// The OUT endpoint.
        endpoint: u8,
        /// The bytes sent.
        data: Vec<u8>,
    },
    /// `bulk_in <ep> <buffer length> <answer | !error>`: the error is
    /// [`LinkError::Timeout`] (`!timeout`), [`LinkError::Pipe`] (`!pipe`) or
    /// [`LinkError::NoDevice`] (`!nodev`).
    BulkIn {
        /// The IN endpoint.
        endpoint: u8,
        /// The buffer length.
        length: usize,
        /// The bytes read (at most `length`), or the failure.
        answer: Result<Vec<u8>, LinkError>,
    },
}

impl Recorded {
    /// The call, borrowing the line's data.
    pub(crate) fn call(&self) -> Call<'_> {
        match self {
            Recorded::Open { vendor, product } => Call::Open {
                vendor: *vendor,
                product: *product,
            },
            Recorded::SetConfiguration(n) => Call::SetConfiguration(*n),
            Recorded::ClaimInterface(n) => Call::ClaimInterface(*n),
            Recorded::Close => Call::Close,
            Recorded::ControlOut { setup, data } => Call::ControlOut {
                setup: *setup,
                data,
            },
            Recorded::ControlIn { setup, length, .. } => Call::ControlIn {
                setup: *setup,
                length: *length,
            },
            Recorded::BulkOut { endpoint, data } => Call::BulkOut {
                endpoint: *endpoint,
                data,
            },
            Recorded::BulkIn {
                endpoint, length, ..
            } => Call::BulkIn {
                endpoint: *endpoint,
                length: *length,
            },
        }
    }

    /// The recorded answer of an IN call (`None` for the other calls).
    pub(crate) fn answer(&self) -> Option<Result<&[u8], LinkError>> {
        match self {
            Recorded::ControlIn { answer, .. } => Some(Ok(answer)),
            Recorded::BulkIn { answer, .. } => Some(answer.as_deref().map_err(|e| *e)),
            _ => None,
        }
    }
}

/// The line's text: the call, then the answer of an IN call.
impl fmt::Display for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.call().fmt(f)?;
        match self.answer() {
            Some(a) => write!(f, " {}", Answer(a)),
            None => Ok(()),
        }
    }
}

/// One meaningful line of a recording.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `accepted <v>[,<v>...]`
    Accepted(Vec<u8>),
    /// `switch armed` (true) or `switch tripped` (false)
    SwitchArmed(bool),
    /// `cycle <k> <t_ms>`
    Cycle {
        /// The cycle's number.
        k: u64,
        /// The cycle's start, ms since the session started (at most
        /// 18446744073709: the time in ns fits a u64).
        t_ms: u64,
    },
    /// `command ...`
    Command(Box<Command>),
    /// `silence`
    Silence,
    /// `trip <reason>`, the reason by its name (`udp`, ...), or `trip
    /// unknown` (`None`): a trip whose reason was gone when the runtime saw
    /// it (tripped and re-armed between two frames).
    Trip(Option<Reason>),
    /// `rearm`
    Rearm,
    /// `wake`: a person's wake taken before this cycle's frame (the
    /// runtime's wake latch; a recording without any replays as if every
    /// re-arm were followed by a wake).
    Wake,
    /// `bringup <JointName> [<limit-name>=<value> ...]`: a setting, the
    /// session runs in bring-up mode for `joint` within `limits` (the line
    /// names every limit that differs from its default).
    BringUp {
        /// The one joint that may have stiffness.
        joint: Joint,
        /// The bring-up limits (each its default or tighter).
        limits: BringUpLimits,
    },
    /// `jog +` / `jog -`: a person's jog step taken before this cycle's
    /// frame (at most one a cycle; only after a `bringup` line).
    Jog(Jog),
    /// A USB call.
    Call(Recorded),
}

/// An item with the 1-based line number it stands on.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// 1-based line number in the file.
    pub number: usize,
    /// What the line says.
    pub item: Item,
}

/// The line's text as the writer writes it (a `command` line is shortened
/// to `command ...`).
impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Call(c) => c.fmt(f),
            Item::Accepted(v) => {
                f.write_str("accepted ")?;
                for (i, x) in v.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    write!(f, "{sep}{x}")?;
                }
                Ok(())
            }
            Item::SwitchArmed(true) => f.write_str("switch armed"),
            Item::SwitchArmed(false) => f.write_str("switch tripped"),
            Item::Cycle { k, t_ms } => write!(f, "cycle {k} {t_ms}"),
            Item::Command(_) => f.write_str("command ..."),
            Item::Silence => f.write_str("silence"),
            Item::Trip(r) => write!(f, "trip {}", r.map_or(UNKNOWN_REASON, Reason::name)),
            Item::Rearm => f.write_str("rearm"),
            Item::Wake => f.write_str("wake"),
            Item::BringUp { joint, limits } => BringUpLine {
                joint: *joint,
                limits,
            }
            .fmt(f),
            Item::Jog(j) => write!(f, "jog {}", jog_word(*j)),
        }
    }
}

/// The word of a `jog` line: `+` or `-`.
pub const fn jog_word(jog: Jog) -> &'static str {
    match jog {
        Jog::Plus => "+",
        Jog::Minus => "-",
    }
}

/// The text of a `bringup` line: `bringup <JointName>` and, in
/// [`Limit::ALL`]'s order, `<name>=<value>` for every limit that differs
/// from its default (the value in Rust's shortest round-trip form).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BringUpLine<'a> {
    /// The joint.
    pub(crate) joint: Joint,
    /// The limits.
    pub(crate) limits: &'a BringUpLimits,
}

impl fmt::Display for BringUpLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bringup {}", self.joint.name())?;
        for l in Limit::ALL {
            let v = self.limits.get(l);
            if v.to_bits() != l.default_value().to_bits() {
                write!(f, " {}={v}", l.name())?;
            }
        }
        Ok(())
    }
}
