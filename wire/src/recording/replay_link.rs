//! The replay link: answers every USB call from a recording and checks that
//! each call equals the next call line (kind, parameters, bytes).
//!
//! On the first difference it records a [`Mismatch`] (line number, expected
//! and actual call, first differing byte offset) and fails that call and
//! every later one with [`LinkError::Mismatch`]. The driver of
//! [`crate::replay`] reads the input lines between the calls with
//! [`ReplayLink::peek`] and [`ReplayLink::advance`].

use core::fmt;

use crate::link::{answer_buf, Call, Link, LinkError};
use crate::recording::{Item, Line, Recorded};

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

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// The call the runtime made, in the recording's syntax (an IN call's
/// answer shown as `<answer>`).
fn actual_text(call: &Call<'_>) -> String {
    match call {
        Call::ControlIn { .. } | Call::BulkIn { .. } => format!("{call} <answer>"),
        _ => call.to_string(),
    }
}

/// The link that replays a recording.
#[derive(Debug)]
pub(crate) struct ReplayLink {
    lines: Vec<Line>,
    pos: usize,
    matched: usize,
    mismatch: Option<Mismatch>,
    /// The mismatch's text, for [`Link::detail`].
    mismatch_text: Option<String>,
    end_line: usize,
}

impl ReplayLink {
    /// A link over a recording's lines (as [`crate::recording::read_file`]
    /// gives them).
    pub(crate) fn new(lines: Vec<Line>) -> Self {
        let end_line = lines.last().map_or(1, |l| l.number + 1);
        ReplayLink {
            lines,
            pos: 0,
            matched: 0,
            mismatch: None,
            mismatch_text: None,
            end_line,
        }
    }

    /// The next line not consumed yet.
    pub(crate) fn peek(&self) -> Option<&Line> {
        self.lines.get(self.pos)
    }

    /// Consumes the next line (an input line the driver has applied).
    pub(crate) fn advance(&mut self) {
        if self.pos < self.lines.len() {
            self.pos += 1;
        }
    }

    /// Calls matched so far.
    pub(crate) fn matched(&self) -> usize {
        self.matched
    }

    /// The first difference, if any.
    pub(crate) fn mismatch(&self) -> Option<&Mismatch> {
        self.mismatch.as_ref()
    }

    /// Records a difference found by the driver (a call left over).
    pub(crate) fn set_mismatch(&mut self, m: Mismatch) {
        if self.mismatch.is_none() {
            self.mismatch_text = Some(format!("replay mismatch: {m}"));
            self.mismatch = Some(m);
        }
    }

    /// The line number one past the last line.
    pub(crate) fn end_line(&self) -> usize {
        self.end_line
    }

    fn fail(
        &mut self,
        expected_line: Option<usize>,
        actual: &Call<'_>,
        offset: Option<usize>,
    ) -> LinkError {
        let (line, expected) = match expected_line.and_then(|i| self.lines.get(i)) {
            Some(l) => (l.number, l.item.to_string()),
            None => (self.end_line, "end of recording".to_string()),
        };
        self.set_mismatch(Mismatch {
            line,
            expected,
            actual: actual_text(actual),
            offset,
        });
        LinkError::Mismatch
    }

    /// Matches `actual` against the next line; on success returns the
    /// recorded call and advances.
    fn next_call(&mut self, actual: &Call<'_>) -> Result<&Recorded, LinkError> {
        if self.mismatch.is_some() {
            return Err(LinkError::Mismatch);
        }
        let i = self.pos;
        let Some(Line {
            item: Item::Call(recorded),
            ..
        }) = self.lines.get(i)
        else {
            return Err(self.fail(Some(i), actual, None));
        };
        let expected = recorded.call();
        // Same kind and parameters: compare the data; else it differs.
        let offset = first_difference(expected.data(), actual.data());
        let same_head = match (expected, *actual) {
            (Call::ControlOut { setup: a, .. }, Call::ControlOut { setup: b, .. }) => a == b,
            (Call::BulkOut { endpoint: a, .. }, Call::BulkOut { endpoint: b, .. }) => a == b,
            (e, a) => e == a,
        };
        if !same_head {
            return Err(self.fail(Some(i), actual, None));
        }
        if offset.is_some() {
            return Err(self.fail(Some(i), actual, offset));
        }
        self.pos += 1;
        self.matched += 1;
        match &self.lines[i].item {
            Item::Call(c) => Ok(c),
            _ => Err(LinkError::Other),
        }
    }
}

impl Link for ReplayLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        let buf = answer_buf(&call, answer)?;
        match self.next_call(&call)?.answer() {
            None => Ok(call.data().len()),
            Some(Ok(recorded)) => {
                let n = recorded.len().min(buf.len());
                buf[..n].copy_from_slice(&recorded[..n]);
                Ok(n)
            }
            Some(Err(e)) => Err(e),
        }
    }

    fn detail(&self) -> Option<&str> {
        self.mismatch_text.as_deref()
    }
}

#[cfg(test)]
mod tests;
