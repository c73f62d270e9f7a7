//! `nao-rs-usbmon verify CAPTURE.pcap`: imports a usbmon capture of HAL (with
//! the commands read back from HAL's frames) and replays each session that
//! holds a start-up through nao-rs's own start-up and cycle code
//! ([`nao_wire::replay::replay_lines`], what `nao-rs replay` runs), so every
//! frame nao-rs would build is compared byte for byte with HAL's.
//!
//! The report says what was compared (sessions, frames, cycles, commands
//! read back) and what could not be (a session without its start-up, frames
//! after a failed transfer, transfers of HAL stopping, cycles whose command
//! could not be read back). [`Report::passed`] holds only when at least one
//! frame was compared and every compared frame was equal.

use std::fmt::Write as _;
use std::path::Path;

use nao_wire::recording::{parse, Item, Recorded};
use nao_wire::replay::{replay_lines, ReplayFailure};

use crate::{import, ImportError, ImportOptions};

/// How to verify.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// The chest board's (bus, device); `None`: found as the import finds it.
    pub device: Option<(u16, u8)>,
    /// The accepted configuration versions of the runtime to compare
    /// (`None`: the runtime's default).
    pub accepted: Option<Vec<u8>>,
}

/// The first difference of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The cycle it is in (`None`: in the start-up).
    pub cycle: Option<u64>,
    /// The line of the session's recording.
    pub line: usize,
    /// HAL's call (the recording's line).
    pub expected: String,
    /// nao-rs's call.
    pub got: String,
    /// The first differing byte offset in the data, when the calls are of
    /// the same kind and parameters.
    pub offset: Option<usize>,
    /// HAL's byte at `offset` (absent: its data is shorter).
    pub expected_byte: Option<u8>,
    /// nao-rs's byte at `offset`.
    pub got_byte: Option<u8>,
}

/// What became of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not replayed; why.
    NotCompared(String),
    /// Every call equal.
    Equal {
        /// Frames compared.
        frames: usize,
        /// Cycles run.
        cycles: u64,
        /// Calls matched.
        calls: usize,
        /// The start-up error it ended with, as recorded.
        startup_error: Option<String>,
    },
    /// A call differed.
    Differs(Difference),
    /// The replay stopped for another reason (a cycle line out of count).
    Failed(String),
}

/// One session's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReport {
    /// 1-based.
    pub number: usize,
    /// Its first packet in the capture.
    pub first_packet: usize,
    /// Commands read back and cycles whose command could not be.
    pub commands: (usize, usize),
    /// What of it is not compared.
    pub notes: Vec<String>,
    /// The outcome.
    pub outcome: Outcome,
}

/// The verification of one capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The chest board's device numbers followed.
    pub devices: Vec<(u16, u8)>,
    /// The sessions in capture order.
    pub sessions: Vec<SessionReport>,
    /// The importer's warnings.
    pub warnings: Vec<String>,
}

impl Report {
    /// Frames compared equal.
    pub fn frames_equal(&self) -> usize {
        self.sessions
            .iter()
            .map(|s| match s.outcome {
                Outcome::Equal { frames, .. } => frames,
                _ => 0,
            })
            .sum()
    }

    /// Whether a session differed (or its replay failed).
    pub fn differs(&self) -> bool {
        self.sessions
            .iter()
            .any(|s| matches!(s.outcome, Outcome::Differs(_) | Outcome::Failed(_)))
    }

    /// At least one frame compared, and every compared frame equal.
    pub fn passed(&self) -> bool {
        !self.differs() && self.frames_equal() > 0
    }

    /// The report as text, ending with a `PASS` or `FAIL` line; `name`
    /// names the capture.
    pub fn render(&self, name: &str) -> String {
        let mut o = String::new();
        let devs: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("bus {} device {}", d.0, d.1))
            .collect();
        let _ = writeln!(
            o,
            "{name}: chest board {}; {} session(s)",
            devs.join(", then "),
            self.sessions.len()
        );
        for s in &self.sessions {
            let head = format!("session {} (from packet {})", s.number, s.first_packet);
            match &s.outcome {
                Outcome::NotCompared(why) => {
                    let _ = writeln!(o, "  {head}: not compared: {why}");
                }
                Outcome::Equal {
                    frames,
                    cycles,
                    calls,
                    startup_error,
                } => {
                    let _ = writeln!(
                        o,
                        "  {head}: equal: {frames} frames, {cycles} cycles, {calls} calls; commands read back in {} cycles, not in {}{}",
                        s.commands.0,
                        s.commands.1,
                        startup_error
                            .as_ref()
                            .map(|e| format!(" (start-up ends as recorded: {e})"))
                            .unwrap_or_default()
                    );
                }
                Outcome::Differs(d) => {
                    let place = match d.cycle {
                        Some(k) => format!("cycle {k}"),
                        None => "the start-up".into(),
                    };
                    let _ = writeln!(
                        o,
                        "  {head}: DIFFERS in {place} (line {} of its recording)",
                        d.line
                    );
                    let _ = writeln!(o, "    expected (HAL):  {}", d.expected);
                    let _ = writeln!(o, "    got (nao-rs):    {}", d.got);
                    match d.offset {
                        Some(at) => {
                            let byte = |b: Option<u8>| {
                                b.map_or("none".to_string(), |b| format!("{b:02x}"))
                            };
                            let _ = writeln!(
                                o,
                                "    first differing byte: offset {at}: expected {}, got {}",
                                byte(d.expected_byte),
                                byte(d.got_byte)
                            );
                        }
                        None => {
                            let _ = writeln!(o, "    the calls differ in kind or parameters");
                        }
                    }
                }
                Outcome::Failed(why) => {
                    let _ = writeln!(o, "  {head}: FAILED: {why}");
                }
            }
            for n in &s.notes {
                let _ = writeln!(o, "    not compared: {n}");
            }
        }
        for w in &self.warnings {
            let _ = writeln!(o, "  warning: {w}");
        }
        let frames = self.frames_equal();
        let _ = if self.differs() {
            writeln!(o, "FAIL {name}: a frame nao-rs builds differs from HAL's")
        } else if frames == 0 {
            writeln!(
                o,
                "FAIL {name}: no frame could be compared (capture a HAL restart: `nao-rs capture` does)"
            )
        } else {
            writeln!(o, "PASS {name}: {frames} frames equal byte for byte")
        };
        o
    }
}

/// The bytes of a call line's last field (its data or answer).
fn last_hex(line: &str) -> Vec<u8> {
    let field = line.rsplit(' ').next().unwrap_or("");
    (0..field.len() / 2)
        .map_while(|i| u8::from_str_radix(field.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// Imports `bytes` (a usbmon capture) and replays each session with a
/// start-up; `name` names the capture in the recordings' messages.
///
/// # Errors
///
/// The import's error when the capture cannot be read (it names the byte
/// offset).
pub fn verify(bytes: &[u8], name: &Path, opts: &VerifyOptions) -> Result<Report, ImportError> {
    let imported = import(
        bytes,
        &ImportOptions {
            device: opts.device,
            cycles: true,
            accepted: opts.accepted.clone(),
            switch_armed: None,
            commands: true,
        },
    )?;
    let mut sessions = Vec::with_capacity(imported.segments.len());
    let mut notes_seen = Vec::new();
    for (i, seg) in imported.segments.iter().enumerate() {
        notes_seen.extend(seg.notes.iter().cloned());
        let outcome = if !seg.startup {
            Outcome::NotCompared("it holds no start-up (the capture began after it)".into())
        } else if seg.cycles == 0 {
            Outcome::NotCompared("no whole cycle of it can be compared".into())
        } else {
            replay_segment(&seg.text, name, i + 1)
        };
        sessions.push(SessionReport {
            number: i + 1,
            first_packet: seg.first_packet,
            commands: (seg.commands, seg.commands_unread),
            notes: seg.notes.clone(),
            outcome,
        });
    }
    Ok(Report {
        devices: imported.devices,
        sessions,
        warnings: imported
            .warnings
            .into_iter()
            .filter(|w| !notes_seen.contains(w))
            .collect(),
    })
}

fn replay_segment(text: &str, name: &Path, number: usize) -> Outcome {
    let lines = match parse(text) {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(format!("the imported recording does not parse: {e}")),
    };
    let frames = lines
        .iter()
        .filter(|l| matches!(l.item, Item::Call(Recorded::BulkOut { .. })))
        .count();
    let cycle_at = |line: usize| {
        lines
            .iter()
            .take_while(|l| l.number < line)
            .filter_map(|l| match l.item {
                Item::Cycle { k, .. } => Some(k),
                _ => None,
            })
            .last()
    };
    let path = name.with_extension(format!("session{number}.rec"));
    match replay_lines(lines.clone(), &path) {
        Ok(r) => Outcome::Equal {
            frames,
            cycles: r.cycles,
            calls: r.calls,
            startup_error: r.startup_error,
        },
        Err(ReplayFailure::Mismatch { mismatch: m, .. }) => {
            let (e, g) = (last_hex(&m.expected), last_hex(&m.actual));
            Outcome::Differs(Difference {
                cycle: cycle_at(m.line),
                line: m.line,
                expected_byte: m.offset.and_then(|o| e.get(o).copied()),
                got_byte: m.offset.and_then(|o| g.get(o).copied()),
                expected: m.expected,
                got: m.actual,
                offset: m.offset,
            })
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}
