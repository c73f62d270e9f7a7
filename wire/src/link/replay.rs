//! The replay link: answers every USB call from a recording and checks that
//! each call equals the next call line (kind, parameters, bytes).
//!
//! On the first difference it records a [`Mismatch`] (line number, expected
//! and actual call, first differing byte offset) and fails that call and
//! every later one with [`LinkError::Mismatch`]. The driver of
//! [`crate::replay`] reads the input lines between the calls with
//! [`ReplayLink::peek`] and [`ReplayLink::advance`].

use core::fmt;

use super::{Link, LinkError};
use crate::recording::{BulkError, Call, Item, Line};

/// The first difference between the recording and the runtime's calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The 1-based line number of the expected call (one past the last line
    /// when the recording has ended).
    pub line: usize,
    /// The expected line, as the recording writes it (or `end of recording`).
    pub expected: String,
    /// The call the runtime made, in the same syntax (or `no call`).
    pub actual: String,
    /// The first differing byte offset in the data, when both calls are of
    /// the same kind and parameters and their bytes differ.
    pub offset: Option<usize>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: expected `{}`, actual `{}`",
            self.line, self.expected, self.actual
        )?;
        if let Some(o) = self.offset {
            write!(f, ", first differing byte at offset {o}")?;
        }
        Ok(())
    }
}

fn hex(data: &[u8]) -> String {
    if data.is_empty() {
        return "-".into();
    }
    let mut s = String::with_capacity(data.len() * 2);
    for b in data {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A call in the recording's line syntax.
pub fn call_text(call: &Call) -> String {
    match call {
        Call::Open { vendor, product } => format!("open {vendor:04x}:{product:04x}"),
        Call::SetConfiguration(n) => format!("set_configuration {n}"),
        Call::ClaimInterface(n) => format!("claim_interface {n}"),
        Call::Close => "close".into(),
        Call::ControlOut {
            request_type,
            request,
            value,
            index,
            data,
        } => format!(
            "control_out {request_type:02x} {request:02x} {value:04x} {index:04x} {}",
            hex(data)
        ),
        Call::ControlIn {
            request_type,
            request,
            value,
            index,
            length,
            answer,
        } => format!(
            "control_in {request_type:02x} {request:02x} {value:04x} {index:04x} {length} {}",
            hex(answer)
        ),
        Call::BulkOut { endpoint, data } => format!("bulk_out {endpoint:02x} {}", hex(data)),
        Call::BulkIn {
            endpoint,
            length,
            answer,
        } => {
            let a = match answer {
                Ok(d) => hex(d),
                Err(BulkError::Timeout) => "!timeout".into(),
                Err(BulkError::Pipe) => "!pipe".into(),
                Err(BulkError::NoDevice) => "!nodev".into(),
            };
            format!("bulk_in {endpoint:02x} {length} {a}")
        }
    }
}

/// A non-call line in the recording's syntax (for mismatch messages).
fn item_text(item: &Item) -> String {
    match item {
        Item::Call(c) => call_text(c),
        Item::Accepted(v) => {
            let v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            format!("accepted {}", v.join(","))
        }
        Item::SwitchArmed(true) => "switch armed".into(),
        Item::SwitchArmed(false) => "switch tripped".into(),
        Item::Cycle { k, t_ms } => format!("cycle {k} {t_ms}"),
        Item::Command(_) => "command ...".into(),
        Item::Silence => "silence".into(),
        Item::Trip(r) => format!("trip {r}"),
        Item::Rearm => "rearm".into(),
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// The call the runtime made, borrowed.
enum Actual<'a> {
    Open(u16, u16),
    SetConfiguration(u8),
    ClaimInterface(u8),
    Close,
    ControlOut(u8, u8, u16, u16, &'a [u8]),
    ControlIn(u8, u8, u16, u16, usize),
    BulkOut(u8, &'a [u8]),
    BulkIn(u8, usize),
}

impl Actual<'_> {
    fn text(&self) -> String {
        match *self {
            Actual::Open(v, p) => call_text(&Call::Open {
                vendor: v,
                product: p,
            }),
            Actual::SetConfiguration(n) => call_text(&Call::SetConfiguration(n)),
            Actual::ClaimInterface(n) => call_text(&Call::ClaimInterface(n)),
            Actual::Close => "close".into(),
            Actual::ControlOut(t, r, v, i, d) => call_text(&Call::ControlOut {
                request_type: t,
                request: r,
                value: v,
                index: i,
                data: d.to_vec(),
            }),
            Actual::ControlIn(t, r, v, i, l) => {
                format!("control_in {t:02x} {r:02x} {v:04x} {i:04x} {l} <answer>")
            }
            Actual::BulkOut(e, d) => call_text(&Call::BulkOut {
                endpoint: e,
                data: d.to_vec(),
            }),
            Actual::BulkIn(e, l) => format!("bulk_in {e:02x} {l} <answer>"),
        }
    }
}

/// The link that replays a recording.
#[derive(Debug)]
pub struct ReplayLink {
    lines: Vec<Line>,
    pos: usize,
    matched: usize,
    mismatch: Option<Mismatch>,
    end_line: usize,
}

impl ReplayLink {
    /// A link over a recording's lines (as [`crate::recording::read_file`]
    /// gives them).
    pub fn new(lines: Vec<Line>) -> Self {
        let end_line = lines.last().map_or(1, |l| l.number + 1);
        ReplayLink {
            lines,
            pos: 0,
            matched: 0,
            mismatch: None,
            end_line,
        }
    }

    /// The next line not consumed yet.
    pub fn peek(&self) -> Option<&Line> {
        self.lines.get(self.pos)
    }

    /// Consumes the next line (an input line the driver has applied).
    pub fn advance(&mut self) {
        if self.pos < self.lines.len() {
            self.pos += 1;
        }
    }

    /// Calls matched so far.
    pub fn matched(&self) -> usize {
        self.matched
    }

    /// The first difference, if any.
    pub fn mismatch(&self) -> Option<&Mismatch> {
        self.mismatch.as_ref()
    }

    /// Records a difference found by the driver (a call left over).
    pub fn set_mismatch(&mut self, m: Mismatch) {
        if self.mismatch.is_none() {
            self.mismatch = Some(m);
        }
    }

    /// The line number one past the last line.
    pub fn end_line(&self) -> usize {
        self.end_line
    }

    fn fail(
        &mut self,
        expected_line: Option<usize>,
        actual: &Actual<'_>,
        offset: Option<usize>,
    ) -> LinkError {
        let (line, expected) = match expected_line.and_then(|i| self.lines.get(i)) {
            Some(l) => (l.number, item_text(&l.item)),
            None => (self.end_line, "end of recording".to_string()),
        };
        let m = Mismatch {
            line,
            expected,
            actual: actual.text(),
            offset,
        };
        let e = LinkError::Mismatch(m.to_string());
        self.set_mismatch(m);
        e
    }

    /// Matches `actual` against the next line; on success returns the
    /// recorded call and advances.
    fn next_call(&mut self, actual: Actual<'_>) -> Result<&Call, LinkError> {
        if let Some(m) = &self.mismatch {
            return Err(LinkError::Mismatch(m.to_string()));
        }
        let i = self.pos;
        let Some(Line {
            item: Item::Call(call),
            ..
        }) = self.lines.get(i)
        else {
            return Err(self.fail(Some(i), &actual, None));
        };
        let (same, offset) = match (call, &actual) {
            (Call::Open { vendor, product }, Actual::Open(v, p)) => {
                (vendor == v && product == p, None)
            }
            (Call::SetConfiguration(n), Actual::SetConfiguration(m)) => (n == m, None),
            (Call::ClaimInterface(n), Actual::ClaimInterface(m)) => (n == m, None),
            (Call::Close, Actual::Close) => (true, None),
            (
                Call::ControlOut {
                    request_type,
                    request,
                    value,
                    index,
                    data,
                },
                Actual::ControlOut(t, r, v, x, d),
            ) => {
                if (request_type, request, value, index) != (t, r, v, x) {
                    (false, None)
                } else {
                    let off = first_difference(data, d);
                    (off.is_none(), off)
                }
            }
            (
                Call::ControlIn {
                    request_type,
                    request,
                    value,
                    index,
                    length,
                    ..
                },
                Actual::ControlIn(t, r, v, x, l),
            ) => (
                (request_type, request, value, index) == (t, r, v, x) && *length as usize == *l,
                None,
            ),
            (Call::BulkOut { endpoint, data }, Actual::BulkOut(e, d)) => {
                if endpoint != e {
                    (false, None)
                } else {
                    let off = first_difference(data, d);
                    (off.is_none(), off)
                }
            }
            (
                Call::BulkIn {
                    endpoint, length, ..
                },
                Actual::BulkIn(e, l),
            ) => (endpoint == e && length == l, None),
            _ => (false, None),
        };
        if !same {
            return Err(self.fail(Some(i), &actual, offset));
        }
        self.pos += 1;
        self.matched += 1;
        match &self.lines[i].item {
            Item::Call(c) => Ok(c),
            _ => Err(LinkError::Other("replay: internal line mismatch".into())),
        }
    }
}

impl Link for ReplayLink {
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        self.next_call(Actual::Open(vendor, product)).map(|_| ())
    }

    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError> {
        self.next_call(Actual::SetConfiguration(config)).map(|_| ())
    }

    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError> {
        self.next_call(Actual::ClaimInterface(iface)).map(|_| ())
    }

    fn close(&mut self) {
        let _ = self.next_call(Actual::Close);
    }

    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError> {
        self.next_call(Actual::ControlOut(
            request_type,
            request,
            value,
            index,
            data,
        ))
        .map(|_| data.len())
    }

    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError> {
        match self.next_call(Actual::ControlIn(
            request_type,
            request,
            value,
            index,
            buf.len(),
        ))? {
            Call::ControlIn { answer, .. } => {
                let n = answer.len().min(buf.len());
                buf[..n].copy_from_slice(&answer[..n]);
                Ok(n)
            }
            _ => Err(LinkError::Other("replay: internal call mismatch".into())),
        }
    }

    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError> {
        self.next_call(Actual::BulkOut(endpoint, data))
            .map(|_| data.len())
    }

    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError> {
        match self.next_call(Actual::BulkIn(endpoint, buf.len()))? {
            Call::BulkIn {
                answer: Ok(answer), ..
            } => {
                let n = answer.len().min(buf.len());
                buf[..n].copy_from_slice(&answer[..n]);
                Ok(n)
            }
            Call::BulkIn { answer: Err(e), .. } => Err(match e {
                BulkError::Timeout => LinkError::Timeout,
                BulkError::Pipe => LinkError::Pipe,
                BulkError::NoDevice => LinkError::NoDevice,
            }),
            _ => Err(LinkError::Other("replay: internal call mismatch".into())),
        }
    }
}
