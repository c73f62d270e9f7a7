//! The recording link: wraps any link, forwards every call unchanged and
//! writes the call's line (with the answer, or the error of a `bulk_in`) to a
//! [`RecordingWriter`]; the owner writes the inputs (settings, cycle times,
//! commands, trips, re-arms) where they happen through the same writer.
//!
//! Writing never changes what the wrapped link does or returns: a write error
//! (disk full, closed pipe) is kept, later lines are skipped, and the error is
//! returned by the next input method and by [`RecordingLink::finish`]. Each
//! line is built in the writer's preallocated buffer, so a cycle's calls
//! allocate nothing in the link once the buffer has grown to the longest line;
//! whether the sink allocates is the sink's business (use a `BufWriter` over
//! a file). Only a failure that the format cannot hold (see below) formats a
//! message, on the error path.
//!
//! The format holds errors for `bulk_in` only (`!timeout`, `!pipe`, `!nodev`).
//! A `bulk_in` that fails with another error is written as `!pipe`, after a
//! comment naming the real error (the runtime counts every failed read as a
//! failed exchange, so the replay behaves the same). Any other call that
//! fails is written as a comment `# failed: <call line>: <error>` and not as a
//! call line: a replay of that recording stops there with a mismatch, right
//! below the comment that says why.

use std::io::{self, Write};

use super::{Link, LinkError};
use crate::command::Command;
use crate::recording::{BulkError, RecordingWriter};

/// A link that records every call of the link it wraps.
pub struct RecordingLink<L: Link, W: Write> {
    inner: L,
    writer: RecordingWriter<W>,
    error: Option<io::Error>,
}

impl<L: Link, W: Write> RecordingLink<L, W> {
    /// Wraps `inner`, writing the recording's header to `out` at once.
    pub fn new(inner: L, out: W) -> io::Result<Self> {
        Ok(Self::with_writer(inner, RecordingWriter::new(out)?))
    }

    /// Wraps `inner` with a writer that has already written some lines.
    pub fn with_writer(inner: L, writer: RecordingWriter<W>) -> Self {
        RecordingLink {
            inner,
            writer,
            error: None,
        }
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably (calls made on it directly are not recorded).
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// The first write error, if writing has failed (later lines are lost).
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Ends the recording: flushes the sink and returns the link and the
    /// sink, or the first write error.
    pub fn finish(mut self) -> io::Result<(L, W)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.writer.flush()?;
        Ok((self.inner, self.writer.into_inner()))
    }

    /// Runs one write unless writing has already failed; keeps its error.
    fn write(
        &mut self,
        f: impl FnOnce(&mut RecordingWriter<W>) -> io::Result<()>,
    ) -> io::Result<()> {
        if let Some(e) = &self.error {
            return Err(io::Error::new(
                e.kind(),
                format!("recording stopped after an earlier error: {e}"),
            ));
        }
        match f(&mut self.writer) {
            Ok(()) => Ok(()),
            Err(e) => {
                let again = io::Error::new(e.kind(), e.to_string());
                self.error = Some(e);
                Err(again)
            }
        }
    }

    /// `accepted <v>,...`: before the first call.
    pub fn accepted(&mut self, versions: &[u8]) -> io::Result<()> {
        self.write(|w| w.accepted(versions))
    }

    /// `switch armed` / `switch tripped`: before the first call.
    pub fn switch(&mut self, armed: bool) -> io::Result<()> {
        self.write(|w| w.switch(armed))
    }

    /// `cycle <k> <t_ms>`: at the start of cycle k, before its calls.
    pub fn cycle(&mut self, k: u64, t_ms: u64) -> io::Result<()> {
        self.write(|w| w.cycle(k, t_ms))
    }

    /// `command ...`: when the controller's command changes, before the
    /// cycle's calls (write it only when it differs from the last one: it
    /// stands until the next `command` or `silence`).
    pub fn command(&mut self, command: &Command) -> io::Result<()> {
        self.write(|w| w.command(command))
    }

    /// `silence`: from the first cycle without a new command.
    pub fn silence(&mut self) -> io::Result<()> {
        self.write(|w| w.silence())
    }

    /// `trip <reason>`: before the frame of the cycle that sees the trip.
    pub fn trip(&mut self, reason: &str) -> io::Result<()> {
        self.write(|w| w.trip(reason))
    }

    /// `rearm`: before the frame of the cycle that sees the re-arm.
    pub fn rearm(&mut self) -> io::Result<()> {
        self.write(|w| w.rearm())
    }

    /// `# <text>`
    pub fn comment(&mut self, text: &str) -> io::Result<()> {
        self.write(|w| w.comment(text))
    }

    /// Writes the comment for a failed call the format cannot hold.
    fn failed(&mut self, call: std::fmt::Arguments<'_>, e: &LinkError) {
        let text = format!("failed: {call}: {e}").replace(['\n', '\r'], " ");
        let _ = self.write(|w| w.comment(&text));
    }
}

/// Lowercase hex of `data`, `-` for none (only for the error comments).
struct Hex<'a>(&'a [u8]);

impl std::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl<L: Link, W: Write + Send> Link for RecordingLink<L, W> {
    fn open(&mut self, vendor: u16, product: u16) -> Result<(), LinkError> {
        let r = self.inner.open(vendor, product);
        match &r {
            Ok(()) => {
                let _ = self.write(|w| w.open(vendor, product));
            }
            Err(e) => self.failed(format_args!("open {vendor:04x}:{product:04x}"), e),
        }
        r
    }

    fn set_configuration(&mut self, config: u8) -> Result<(), LinkError> {
        let r = self.inner.set_configuration(config);
        match &r {
            Ok(()) => {
                let _ = self.write(|w| w.set_configuration(config));
            }
            Err(e) => self.failed(format_args!("set_configuration {config}"), e),
        }
        r
    }

    fn claim_interface(&mut self, iface: u8) -> Result<(), LinkError> {
        let r = self.inner.claim_interface(iface);
        match &r {
            Ok(()) => {
                let _ = self.write(|w| w.claim_interface(iface));
            }
            Err(e) => self.failed(format_args!("claim_interface {iface}"), e),
        }
        r
    }

    fn close(&mut self) {
        self.inner.close();
        let _ = self.write(|w| w.close());
    }

    fn control_out(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
    ) -> Result<usize, LinkError> {
        let r = self
            .inner
            .control_out(request_type, request, value, index, data);
        match &r {
            Ok(_) => {
                let _ = self.write(|w| w.control_out(request_type, request, value, index, data));
            }
            Err(e) => self.failed(
                format_args!(
                    "control_out {request_type:02x} {request:02x} {value:04x} {index:04x} {}",
                    Hex(data)
                ),
                e,
            ),
        }
        r
    }

    fn control_in(
        &mut self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        buf: &mut [u8],
    ) -> Result<usize, LinkError> {
        let r = self
            .inner
            .control_in(request_type, request, value, index, buf);
        let length = u16::try_from(buf.len()).unwrap_or(u16::MAX);
        match &r {
            Ok(n) => {
                let answer = &buf[..(*n).min(buf.len())];
                let _ = self
                    .write(|w| w.control_in(request_type, request, value, index, length, answer));
            }
            Err(e) => self.failed(
                format_args!(
                    "control_in {request_type:02x} {request:02x} {value:04x} {index:04x} {length}"
                ),
                e,
            ),
        }
        r
    }

    fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> Result<usize, LinkError> {
        let r = self.inner.bulk_out(endpoint, data);
        match &r {
            Ok(_) => {
                let _ = self.write(|w| w.bulk_out(endpoint, data));
            }
            Err(e) => self.failed(format_args!("bulk_out {endpoint:02x} {}", Hex(data)), e),
        }
        r
    }

    fn bulk_in(&mut self, endpoint: u8, buf: &mut [u8]) -> Result<usize, LinkError> {
        let r = self.inner.bulk_in(endpoint, buf);
        let length = buf.len();
        let answer = match &r {
            Ok(n) => Ok(&buf[..(*n).min(buf.len())]),
            Err(LinkError::Timeout) => Err(BulkError::Timeout),
            Err(LinkError::Pipe) => Err(BulkError::Pipe),
            Err(LinkError::NoDevice) => Err(BulkError::NoDevice),
            Err(other) => {
                let text =
                    format!("bulk_in {endpoint:02x} {length} failed: {other}; written as !pipe")
                        .replace(['\n', '\r'], " ");
                let _ = self.write(|w| w.comment(&text));
                Err(BulkError::Pipe)
            }
        };
        let _ = self.write(|w| w.bulk_in(endpoint, length, answer));
        r
    }
}
