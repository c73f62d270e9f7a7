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

use crate::command::Command;
use crate::link::{Call, Link, LinkError};
use crate::recording::RecordingWriter;
use deathswitch::Reason;

/// A link that records every call of the link it wraps.
pub struct RecordingLink<L: Link, W: Write> {
    inner: L,
    writer: RecordingWriter<W>,
    error: Option<io::Error>,
}

impl<L: Link, W: Write> RecordingLink<L, W> {
    /// Wraps `inner`, writing the recording's header to `out` at once.
    ///
    /// # Errors
    ///
    /// The sink's error writing the header.
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
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably (calls made on it directly are not recorded).
    #[cfg(test)]
    pub(crate) fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Ends the recording: flushes the sink and returns the link and the
    /// sink, or the first write error.
    ///
    /// # Errors
    ///
    /// The first write error (kept since it happened), or the sink's error
    /// flushing.
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
    ///
    /// # Errors
    ///
    /// What [`RecordingWriter::accepted`] refuses, or the sink's write error.
    /// Once a write has failed, every later one fails too (an error of the same
    /// kind saying so; the line is lost): see [`RecordingLink::finish`].
    pub fn accepted(&mut self, versions: &[u8]) -> io::Result<()> {
        self.write(|w| w.accepted(versions))
    }

    /// `switch armed` / `switch tripped`: before the first call.
    ///
    /// # Errors
    ///
    /// What [`RecordingWriter::switch`] refuses, or the sink's write error.
    /// Once a write has failed, every later one fails too (an error of the same
    /// kind saying so; the line is lost): see [`RecordingLink::finish`].
    pub fn switch(&mut self, armed: bool) -> io::Result<()> {
        self.write(|w| w.switch(armed))
    }

    /// `cycle <k> <t_ms>`: at the start of cycle k, before its calls.
    ///
    /// # Errors
    ///
    /// What [`RecordingWriter::cycle`] refuses, or the sink's write error. Once
    /// a write has failed, every later one fails too (an error of the same kind
    /// saying so; the line is lost): see [`RecordingLink::finish`].
    pub fn cycle(&mut self, k: u64, t_ms: u64) -> io::Result<()> {
        self.write(|w| w.cycle(k, t_ms))
    }

    /// `command ...`: when the controller's command changes, before the
    /// cycle's calls (write it only when it differs from the last one: it
    /// stands until the next `command` or `silence`).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a second `command` or `silence` in one cycle, or the
    /// sink's write error. Once a write has failed, every later one fails too
    /// (an error of the same kind saying so; the line is lost): see
    /// [`RecordingLink::finish`].
    pub fn command(&mut self, command: &Command) -> io::Result<()> {
        self.write(|w| w.command(command))
    }

    /// `silence`: from the first cycle without a new command.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a second `command` or `silence` in one cycle, or the
    /// sink's write error. Once a write has failed, every later one fails too
    /// (an error of the same kind saying so; the line is lost): see
    /// [`RecordingLink::finish`].
    pub fn silence(&mut self) -> io::Result<()> {
        self.write(|w| w.silence())
    }

    /// `trip <reason>`: before the frame of the cycle that sees the trip.
    ///
    /// # Errors
    ///
    /// The sink's write error. Once a write has failed, every later one fails
    /// too (an error of the same kind saying so; the line is lost): see
    /// [`RecordingLink::finish`].
    pub fn trip(&mut self, reason: impl Into<Option<Reason>>) -> io::Result<()> {
        let reason = reason.into();
        self.write(|w| w.trip(reason))
    }

    /// `rearm`: before the frame of the cycle that sees the re-arm.
    ///
    /// # Errors
    ///
    /// The sink's write error. Once a write has failed, every later one fails
    /// too (an error of the same kind saying so; the line is lost): see
    /// [`RecordingLink::finish`].
    pub fn rearm(&mut self) -> io::Result<()> {
        self.write(|w| w.rearm())
    }

    /// `wake`: before the frame of the cycle that took a person's wake.
    ///
    /// # Errors
    ///
    /// The sink's write error. Once a write has failed, every later one fails
    /// too (an error of the same kind saying so; the line is lost): see
    /// [`RecordingLink::finish`].
    pub fn wake(&mut self) -> io::Result<()> {
        self.write(|w| w.wake())
    }

    /// `jog +` / `jog -`: a person's jog step before this cycle's frame
    /// (bring-up).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a `jog` before the `bringup` line or a second one in
    /// a cycle, or the sink's write error. Once a write has failed, every later
    /// one fails too (an error of the same kind saying so; the line is lost):
    /// see [`RecordingLink::finish`].
    pub fn jog(&mut self, jog: crate::protocol::bringup::Jog) -> io::Result<()> {
        self.write(|w| w.jog(jog))
    }
}

impl<L: Link, W: Write + Send> Link for RecordingLink<L, W> {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        let r = self.inner.call(call, answer);
        let read = |n: usize| &answer[..n.min(call.answer_len()).min(answer.len())];
        let _ = match (r, call) {
            // `close` never fails: its line stands whatever the link said.
            (_, Call::Close) => self.write(|w| w.close()),
            (Ok(n), _) => self.write(|w| w.call(call, Ok(read(n)))),
            (Err(e), Call::BulkIn { .. }) => {
                if !matches!(
                    e,
                    LinkError::Timeout | LinkError::Pipe | LinkError::NoDevice
                ) {
                    let why = self.inner.detail().unwrap_or("");
                    let text = format!("{call} failed: {e} {why}; written as !pipe")
                        .replace(['\n', '\r'], " ");
                    let _ = self.write(|w| w.comment(&text));
                }
                self.write(|w| w.call(call, Err(e)))
            }
            (Err(e), _) => {
                let why = self.inner.detail().unwrap_or("");
                let text = format!("failed: {call}: {e} {why}").replace(['\n', '\r'], " ");
                self.write(|w| w.comment(text.trim_end()))
            }
        };
        r
    }

    fn detail(&self) -> Option<&str> {
        self.inner.detail()
    }
}
