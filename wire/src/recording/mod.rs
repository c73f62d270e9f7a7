//! The recording format of `spec/recording-format.md`, both ways: the reader
//! (every malformed line rejected with its number and the reason) and the
//! writer.
//!
//! The types below are the contract between the reader, the writer, the
//! replay and the recording link; keep them stable.

use crate::command::Command;

mod reader;
mod writer;

pub use reader::{parse, parse_bytes, read_file, ParseError, HEADER};
pub use writer::{to_text, RecordingWriter};

/// The largest `t_ms` of a `cycle` line: `t_ms * 1_000_000`, the time in
/// ns, fits a u64.
pub const MAX_T_MS: u64 = u64::MAX / 1_000_000;

/// The error of a failed `bulk_in` as a recording holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkError {
    /// `!timeout`
    Timeout,
    /// `!pipe`
    Pipe,
    /// `!nodev`
    NoDevice,
}

/// One USB call line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `open ffff:0006`
    Open { vendor: u16, product: u16 },
    /// `set_configuration <n>`
    SetConfiguration(u8),
    /// `claim_interface <n>`
    ClaimInterface(u8),
    /// `close`
    Close,
    /// `control_out <bmRequestType> <bRequest> <wValue> <wIndex> <data>`
    ControlOut {
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: Vec<u8>,
    },
    /// `control_in <bmRequestType> <bRequest> <wValue> <wIndex> <wLength> <answer>`
    ControlIn {
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        length: u16,
        answer: Vec<u8>,
    },
    /// `bulk_out <ep> <data>`
    BulkOut { endpoint: u8, data: Vec<u8> },
    /// `bulk_in <ep> <buffer length> <answer | !error>`
    BulkIn {
        endpoint: u8,
        length: usize,
        answer: Result<Vec<u8>, BulkError>,
    },
}

/// One meaningful line of a recording.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `accepted <v>[,<v>...]`
    Accepted(Vec<u8>),
    /// `switch armed` (true) or `switch tripped` (false)
    SwitchArmed(bool),
    /// `cycle <k> <t_ms>`
    Cycle { k: u64, t_ms: u64 },
    /// `command ...`
    Command(Box<Command>),
    /// `silence`
    Silence,
    /// `trip <reason>` (the reason's name as written, e.g. `udp`)
    Trip(String),
    /// `rearm`
    Rearm,
    /// A USB call.
    Call(Call),
}

/// An item with the 1-based line number it stands on.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// 1-based line number in the file.
    pub number: usize,
    /// What the line says.
    pub item: Item,
}
