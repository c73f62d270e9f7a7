//! The recording writer: the header, settings, inputs and calls, one line
//! each, in the exact text the reader reads back.
//!
//! Every line is built in one preallocated buffer and written with one
//! `write_all`, so writing a cycle's lines allocates nothing once the buffer
//! has grown to the longest line (it starts at 4 KiB, enough for a 1,024-byte
//! control answer). The writer refuses (with `io::ErrorKind::InvalidInput`)
//! any line the reader would reject, so its output always parses.

use std::io::{self, Write};

use super::{jog_word, BringUpLine, Item, Line, Recorded, HEADER, MAX_T_MS, UNKNOWN_REASON};
use crate::command::{Command, Joint};
use crate::link::{Answer, Call, LinkError};
use crate::protocol::bringup::{BringUpLimits, Jog};
use crate::protocol::handshake::check_accepted;
use deathswitch::Reason;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes a recording to `W`, line by line.
///
/// ```
/// use nao_wire::recording::{parse, RecordingWriter};
/// let mut w = RecordingWriter::new(Vec::new()).unwrap();
/// w.accepted(&[10]).unwrap();
/// w.open(0xffff, 0x0006).unwrap();
/// w.bulk_out(0x02, &[0xa5, 0x00]).unwrap();
/// let text = String::from_utf8(w.into_inner()).unwrap();
/// assert_eq!(text, "nao-rs recording 1\naccepted 10\nopen ffff:0006\nbulk_out 02 a500\n");
/// assert_eq!(parse(&text).unwrap().len(), 3);
/// ```
pub struct RecordingWriter<W: Write> {
    out: W,
    line: Vec<u8>,
    first_call_written: bool,
    accepted_written: bool,
    switch_written: bool,
    last_cycle: Option<(u64, u64)>,
    /// A `command` or `silence` written in the current cycle.
    cycle_command: bool,
    bringup_written: bool,
    /// A `jog` written in the current cycle.
    cycle_jog: bool,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl<W: Write> RecordingWriter<W> {
    /// Starts a recording: writes the header line `nao-rs recording 1`.
    ///
    /// # Errors
    ///
    /// The sink's error writing the header.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w = RecordingWriter {
            out,
            line: Vec::with_capacity(4096),
            first_call_written: false,
            accepted_written: false,
            switch_written: false,
            last_cycle: None,
            cycle_command: false,
            bringup_written: false,
            cycle_jog: false,
        };
        w.line.extend_from_slice(HEADER.as_bytes());
        w.flush_line()?;
        Ok(w)
    }

    /// Flushes the sink.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Ends the writer and returns the sink (not flushed: flush first if it
    /// buffers).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn flush_line(&mut self) -> io::Result<()> {
        self.line.push(b'\n');
        let r = self.out.write_all(&self.line);
        self.line.clear();
        r
    }

    fn push_hex_byte(&mut self, b: u8) {
        self.line.push(HEX[usize::from(b >> 4)]);
        self.line.push(HEX[usize::from(b & 0xf)]);
    }

    fn push_dec(&mut self, v: u64) {
        // Writing into a Vec cannot fail.
        let _ = write!(self.line, "{v}");
    }

    fn push_str(&mut self, s: &str) {
        self.line.extend_from_slice(s.as_bytes());
    }

    fn setting(&mut self, key: &str, which: fn(&mut Self) -> &mut bool) -> io::Result<()> {
        if self.first_call_written {
            return Err(invalid(format!(
                "recording: `{key}` is a setting and must be written before the first call"
            )));
        }
        let seen = which(self);
        if *seen {
            return Err(invalid(format!(
                "recording: `{key}` written twice (a setting stands once)"
            )));
        }
        *seen = true;
        Ok(())
    }

    /// `# <text>`: a comment line (the reader skips it). `text` must be one
    /// line.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a `text` with a line break; else the sink's write
    /// error.
    pub fn comment(&mut self, text: &str) -> io::Result<()> {
        if text.contains(['\n', '\r']) {
            return Err(invalid(format!(
                "recording: a comment must be one line, got {text:?}"
            )));
        }
        self.push_str("# ");
        self.push_str(text);
        self.flush_line()
    }

    /// `accepted <v>[,<v>...]`: a setting, before the first call.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a list
    /// [`check_accepted`](crate::protocol::handshake::check_accepted) refuses,
    /// after the first call, or for a second `accepted`; else the sink's write
    /// error.
    pub fn accepted(&mut self, versions: &[u8]) -> io::Result<()> {
        check_accepted(versions).map_err(|e| invalid(format!("recording: `accepted`: {e}")))?;
        self.setting("accepted", |w| &mut w.accepted_written)?;
        self.push_str("accepted ");
        for (i, &v) in versions.iter().enumerate() {
            if i > 0 {
                self.line.push(b',');
            }
            self.push_dec(v.into());
        }
        self.flush_line()
    }

    /// `switch armed` / `switch tripped`: a setting, before the first call.
    ///
    /// # Errors
    ///
    /// `InvalidInput` after the first call or for a second `switch`; else the
    /// sink's write error.
    pub fn switch(&mut self, armed: bool) -> io::Result<()> {
        self.setting("switch", |w| &mut w.switch_written)?;
        self.push_str(if armed {
            "switch armed"
        } else {
            "switch tripped"
        });
        self.flush_line()
    }

    /// `cycle <k> <t_ms>`: k strictly above the last cycle's, t_ms not below
    /// and at most 18446744073709 (the time in ns fits a u64).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a `t_ms` above the bound, or a `k` not above or a
    /// `t_ms` below the last cycle's; else the sink's write error.
    pub fn cycle(&mut self, k: u64, t_ms: u64) -> io::Result<()> {
        if t_ms > MAX_T_MS {
            return Err(invalid(format!(
                "recording: cycle {k} at {t_ms} ms: t_ms is above {MAX_T_MS} (the time in ns must fit 64 bits)"
            )));
        }
        if let Some((pk, pt)) = self.last_cycle {
            if k <= pk || t_ms < pt {
                return Err(invalid(format!(
                    "recording: cycle {k} at {t_ms} ms cannot follow cycle {pk} at {pt} ms \
                     (cycle numbers increase, time never goes back)"
                )));
            }
        }
        if self.last_cycle.is_some() {
            // Inputs before the first cycle line are the first cycle's.
            self.cycle_command = false;
            self.cycle_jog = false;
        }
        self.last_cycle = Some((k, t_ms));
        self.push_str("cycle ");
        self.push_dec(k);
        self.line.push(b' ');
        self.push_dec(t_ms);
        self.flush_line()
    }

    /// `command ...`: 50 values in Rust's shortest round-trip form (`nan`,
    /// `inf`, `-inf` for the non-finite; every NaN is written `nan`), the LEDs
    /// and the sonar mode.
    /// At most one `command` or `silence` a cycle.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a second `command` or `silence` in a cycle; else
    /// the sink's write error.
    pub fn command(&mut self, c: &Command) -> io::Result<()> {
        self.once_a_cycle("command")?;
        self.push_str("command");
        for &v in c.stiffness.iter().chain(c.position.iter()) {
            self.line.push(b' ');
            if v.is_nan() {
                self.push_str("nan");
            } else {
                // Display prints the shortest decimal that parses back to the
                // same f32 (and `inf` / `-inf`); into a Vec it cannot fail.
                let _ = write!(self.line, "{v}");
            }
        }
        for rgb in [c.chest_led, c.left_foot_led, c.right_foot_led] {
            self.line.push(b' ');
            for b in rgb {
                self.push_hex_byte(b);
            }
        }
        self.line.push(b' ');
        self.push_hex_byte(c.sonar_mode);
        self.flush_line()
    }

    /// `silence`; at most one `command` or `silence` a cycle.
    pub(crate) fn silence(&mut self) -> io::Result<()> {
        self.once_a_cycle("silence")?;
        self.push_str("silence");
        self.flush_line()
    }

    fn once_a_cycle(&mut self, key: &str) -> io::Result<()> {
        if self.cycle_command {
            return Err(invalid(format!(
                "recording: `{key}`: a second command or silence in one cycle (a cycle has at most one)"
            )));
        }
        self.cycle_command = true;
        Ok(())
    }

    /// `trip <reason>`, the reason by its name (`naoctl`, `udp`, ...), or
    /// `trip unknown` for `None`.
    pub(crate) fn trip(&mut self, reason: impl Into<Option<Reason>>) -> io::Result<()> {
        self.push_str("trip ");
        self.push_str(reason.into().map_or(UNKNOWN_REASON, Reason::name));
        self.flush_line()
    }

    /// `rearm`
    pub(crate) fn rearm(&mut self) -> io::Result<()> {
        self.push_str("rearm");
        self.flush_line()
    }

    /// `wake`
    pub(crate) fn wake(&mut self) -> io::Result<()> {
        self.push_str("wake");
        self.flush_line()
    }

    /// `bringup <JointName> [<limit-name>=<value> ...]`: a setting, before
    /// the first call, once; names every limit that differs from its
    /// default. The limits are a [`BringUpLimits`], so
    /// each is its bound or tighter.
    ///
    /// # Errors
    ///
    /// `InvalidInput` after the first call or for a second `bringup`; else the
    /// sink's write error.
    pub fn bringup(&mut self, joint: Joint, limits: &BringUpLimits) -> io::Result<()> {
        self.setting("bringup", |w| &mut w.bringup_written)?;
        // Writing into a Vec cannot fail.
        let _ = write!(self.line, "{}", BringUpLine { joint, limits });
        self.flush_line()
    }

    /// `jog +` / `jog -`: a person's jog step before this cycle's frame; only
    /// after the `bringup` line, at most one a cycle.
    pub(crate) fn jog(&mut self, jog: Jog) -> io::Result<()> {
        if !self.bringup_written {
            return Err(invalid(
                "recording: `jog` before the `bringup` line (a jog is a bring-up input)"
                    .to_string(),
            ));
        }
        if self.cycle_jog {
            return Err(invalid(
                "recording: `jog`: a second jog in one cycle (a cycle has at most one)".to_string(),
            ));
        }
        self.cycle_jog = true;
        self.push_str("jog ");
        self.push_str(jog_word(jog));
        self.flush_line()
    }

    /// One call line: `call` as [`Call`]'s `Display` writes it, then, for
    /// `control_in` and `bulk_in`, the answer (the bytes, or for `bulk_in`
    /// the error: [`LinkError::recorded`]). Refuses what the reader rejects:
    /// a control transfer whose bmRequestType direction bit does not match,
    /// more than 65535 control bytes, a bulk endpoint of the wrong direction,
    /// an answer longer than asked, a `bulk_in` length of 2^32 or more, a
    /// failed `control_in`.
    pub(crate) fn call(
        &mut self,
        call: Call<'_>,
        answer: Result<&[u8], LinkError>,
    ) -> io::Result<()> {
        let answer_len = answer.map_or(0, <[u8]>::len);
        let wrong = match call {
            Call::ControlOut { setup, data } => {
                setup.request_type & 0x80 != 0 || data.len() > usize::from(u16::MAX)
            }
            Call::ControlIn { setup, length } => {
                setup.request_type & 0x80 == 0
                    || answer.is_err()
                    || answer_len > usize::from(length)
            }
            Call::BulkOut { endpoint, .. } => endpoint & 0x80 != 0,
            Call::BulkIn { endpoint, length } => {
                endpoint & 0x80 == 0 || answer_len > length || length > u32::MAX as usize
            }
            _ => false,
        };
        if wrong {
            return Err(invalid(format!(
                "recording: `{call}` with a {answer_len}-byte answer cannot be written (control \
                 transfers need the bmRequestType direction bit 0x80 to match and at most 65535 \
                 bytes; bulk_out needs an OUT endpoint, bulk_in an IN endpoint and a length below \
                 2^32; an answer is at most the length asked)"
            )));
        }
        self.first_call_written = true;
        // Writing into a Vec cannot fail.
        let _ = write!(self.line, "{call}");
        if matches!(call, Call::ControlIn { .. } | Call::BulkIn { .. }) {
            let _ = write!(self.line, " {}", Answer(answer));
        }
        self.flush_line()
    }

    /// `open vvvv:pppp`
    ///
    /// # Errors
    ///
    /// The sink's write error.
    pub fn open(&mut self, vendor: u16, product: u16) -> io::Result<()> {
        self.call(Call::Open { vendor, product }, Ok(&[]))
    }

    /// `claim_interface <n>`
    ///
    /// # Errors
    ///
    /// The sink's write error.
    pub fn claim_interface(&mut self, iface: u8) -> io::Result<()> {
        self.call(Call::ClaimInterface(iface), Ok(&[]))
    }

    /// `close`
    ///
    /// # Errors
    ///
    /// The sink's write error.
    pub fn close(&mut self) -> io::Result<()> {
        self.call(Call::Close, Ok(&[]))
    }

    /// `bulk_out <ep> <data>`; the endpoint has bit 7 clear.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an IN endpoint (bit 7 set); else the sink's write
    /// error.
    pub fn bulk_out(&mut self, endpoint: u8, data: &[u8]) -> io::Result<()> {
        self.call(Call::BulkOut { endpoint, data }, Ok(&[]))
    }

    /// `bulk_in <ep> <buffer length> <answer | !timeout | !pipe | !nodev>`;
    /// the endpoint has bit 7 set and the answer is at most `length` bytes.
    #[cfg(test)]
    pub(crate) fn bulk_in(
        &mut self,
        endpoint: u8,
        length: usize,
        answer: Result<&[u8], LinkError>,
    ) -> io::Result<()> {
        self.call(Call::BulkIn { endpoint, length }, answer)
    }

    /// Writes one recorded call line.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a line the reader would reject (a control transfer
    /// whose bmRequestType direction bit does not match or with more than 65535
    /// bytes, a bulk endpoint of the wrong direction, an answer longer than
    /// asked, a `bulk_in` length of 2^32 or more, a failed `control_in`); else
    /// the sink's write error.
    pub fn recorded(&mut self, line: &Recorded) -> io::Result<()> {
        self.call(line.call(), line.answer().unwrap_or(Ok(&[])))
    }

    /// Writes one item (any line kind).
    pub(crate) fn item(&mut self, item: &Item) -> io::Result<()> {
        match item {
            Item::Accepted(v) => self.accepted(v),
            Item::SwitchArmed(armed) => self.switch(*armed),
            Item::Cycle { k, t_ms } => self.cycle(*k, *t_ms),
            Item::Command(c) => self.command(c),
            Item::Silence => self.silence(),
            Item::Trip(reason) => self.trip(*reason),
            Item::Rearm => self.rearm(),
            Item::Wake => self.wake(),
            Item::BringUp { joint, limits } => self.bringup(*joint, limits),
            Item::Jog(jog) => self.jog(*jog),
            Item::Call(c) => self.recorded(c),
        }
    }

    /// Writes every line's item in order (line numbers are not kept: the
    /// output has no comments or blank lines).
    pub(crate) fn lines(&mut self, lines: &[Line]) -> io::Result<()> {
        lines.iter().try_for_each(|l| self.item(&l.item))
    }
}

/// The recording text of `lines` (header included), as [`RecordingWriter`]
/// writes it.
///
/// # Errors
///
/// `InvalidInput` for the first line the writer refuses (a setting after a call
/// or twice, cycles out of order, two commands in a cycle, a `jog` before
/// `bringup`, a call the reader would reject).
pub fn to_text(lines: &[Line]) -> io::Result<String> {
    let mut w = RecordingWriter::new(Vec::new())?;
    w.lines(lines)?;
    // The writer writes only ASCII.
    String::from_utf8(w.into_inner()).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::parse;

    #[test]
    fn writer_refuses_what_the_reader_rejects_as_malformed() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        let seventeen: Vec<u8> = (0..17).collect();
        assert!(w.accepted(&seventeen).is_err());
        assert!(w.accepted(&[10, 10]).is_err());
        w.accepted(&[10, 11]).unwrap();
        w.silence().unwrap();
        w.cycle(0, 0).unwrap();
        assert!(
            w.command(&Command::default()).is_err(),
            "silence before cycle 0 is cycle 0's"
        );
        w.cycle(1, 12).unwrap();
        w.command(&Command::default()).unwrap();
        assert!(w.silence().is_err());
        assert!(w.cycle(2, MAX_T_MS + 1).is_err());
        w.cycle(2, MAX_T_MS).unwrap();
        w.silence().unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(parse(&text).unwrap().len(), 7);
    }

    #[test]
    fn settings_after_a_call_are_refused() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.switch(true).unwrap();
        w.close().unwrap();
        assert_eq!(
            w.accepted(&[10]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(w.switch(false).is_err());
    }

    #[test]
    fn cycles_must_increase() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.cycle(3, 30).unwrap();
        assert!(w.cycle(3, 31).is_err());
        assert!(w.cycle(4, 29).is_err());
        w.cycle(4, 30).unwrap();
    }

    #[test]
    fn command_values_round_trip_exactly() {
        let mut c = Command::default();
        let vals = [
            0.05f32,
            -1.2,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            f32::MIN,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.1 + 0.2,
            std::f32::consts::PI,
        ];
        for (i, v) in vals.iter().enumerate() {
            c.stiffness[i] = *v;
            c.position[24 - i] = -*v;
        }
        c.sonar_mode = 0xab;
        c.left_foot_led = [1, 2, 3];
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.command(&c).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        let lines = parse(&text).unwrap();
        let Item::Command(back) = &lines[0].item else {
            panic!("{lines:?}")
        };
        for j in 0..crate::JOINTS {
            for (a, b) in [
                (c.stiffness[j], back.stiffness[j]),
                (c.position[j], back.position[j]),
            ] {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{a} -> {b}"
                );
            }
        }
        assert_eq!((back.sonar_mode, back.left_foot_led), (0xab, [1, 2, 3]));
    }

    #[test]
    fn bulk_in_errors_are_written() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.bulk_in(0x81, 512, Err(LinkError::Timeout)).unwrap();
        w.bulk_in(0x81, 512, Err(LinkError::Pipe)).unwrap();
        w.bulk_in(0x81, 512, Err(LinkError::NoDevice)).unwrap();
        w.bulk_in(0x81, 512, Ok(&[])).unwrap();
        assert!(w.bulk_in(0x81, 1, Ok(&[1, 2])).is_err());
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(
            text,
            "nao-rs recording 1\nbulk_in 81 512 !timeout\nbulk_in 81 512 !pipe\n\
             bulk_in 81 512 !nodev\nbulk_in 81 512 -\n"
        );
    }

    #[test]
    fn bringup_and_jog_lines_round_trip() {
        use crate::protocol::bringup::Limit;
        let limits = BringUpLimits::default()
            .tighten(Limit::MaxStiffness, 0.3)
            .and_then(|l| l.tighten(Limit::JogStep, 0.025))
            .and_then(|l| l.tighten(Limit::LyingHeld, 2.5))
            .and_then(|l| l.tighten(Limit::OverCurrentCycles, 7.0))
            .unwrap();
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.accepted(&[10, 11]).unwrap();
        w.bringup(Joint::LShoulderPitch, &limits).unwrap();
        w.jog(Jog::Plus).unwrap();
        w.cycle(0, 0).unwrap();
        w.cycle(1, 12).unwrap();
        w.jog(Jog::Minus).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(
            text,
            "nao-rs recording 1\naccepted 10,11\nbringup LShoulderPitch max-stiffness=0.3 \
             jog-step=0.025 over-current-cycles=7 lying-held=2.5\njog +\ncycle 0 0\ncycle 1 12\njog -\n"
        );
        let lines = parse(&text).unwrap();
        assert_eq!(
            lines[1].item,
            Item::BringUp {
                joint: Joint::LShoulderPitch,
                limits
            }
        );
        assert_eq!(lines[2].item, Item::Jog(Jog::Plus));
        assert_eq!(lines[5].item, Item::Jog(Jog::Minus));
        assert_eq!(to_text(&lines).unwrap(), text);
        // The default limits: the joint alone.
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.bringup(Joint::HeadYaw, &BringUpLimits::default())
            .unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(text, "nao-rs recording 1\nbringup HeadYaw\n");
    }

    #[test]
    fn bringup_and_jog_lines_the_reader_rejects_are_refused() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        assert!(w.jog(Jog::Plus).is_err(), "a jog before the bringup line");
        w.bringup(Joint::HeadYaw, &BringUpLimits::default())
            .unwrap();
        assert!(w
            .bringup(Joint::HeadYaw, &BringUpLimits::default())
            .is_err());
        w.cycle(0, 0).unwrap();
        w.jog(Jog::Plus).unwrap();
        assert!(w.jog(Jog::Minus).is_err(), "two jogs in one cycle");
        w.close().unwrap();
        let e = w.bringup(Joint::HeadYaw, &BringUpLimits::default());
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        w.cycle(1, 12).unwrap();
        w.jog(Jog::Minus).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(parse(&text).unwrap().len(), 6);
    }

    #[test]
    fn comments_are_one_line_and_trips_are_written_by_reason_name() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        assert!(w.comment("a\nb").is_err());
        w.trip(Reason::ChestButton).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert!(text.ends_with("trip chest-button\n"), "{text}");
    }
}
