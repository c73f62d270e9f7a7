//! The replay driver: runs the runtime's own start-up and cycle code
//! ([`Startup::run`], [`Cycle::run`]) over a [`ReplayLink`] with the
//! recording's clock (its `cycle` lines), applying the inputs (`command`,
//! `silence`, `trip`, `rearm`, `accepted`, `switch`) where they stand, and
//! checks that every call matches and none is left over.
//!
//! The replay's switch is virtual: `switch` sets it, `trip` trips it,
//! `rearm` re-arms it, and a trip raised by an answer trips it (as the
//! runtime trips the page). Like the page it counts its armed -> tripped
//! transitions, and the cycle is given that count, so a `trip` and a
//! `rearm` among one cycle's inputs make that cycle's frame tripped.

use core::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::command::Command;
use crate::link::Link;
use crate::protocol::cycle::{Cycle, CycleInput};
use crate::protocol::handshake::DEFAULT_ACCEPTED;
use crate::protocol::startup::{Startup, StartupError};
use crate::recording::replay_link::{Mismatch, ReplayLink};
use crate::recording::{self, Item, Line, ParseError, Recorded};

/// A replay that passed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// The file (empty for [`replay_lines`] without a path).
    pub path: PathBuf,
    /// USB calls matched.
    pub calls: usize,
    /// Cycles run.
    pub cycles: u64,
    /// Wall time of the replay (reading the file included for
    /// [`replay_file`]).
    pub elapsed: Duration,
    /// The start-up error the recording ends with, if it is one of a failed
    /// start-up (the runtime then sends no frame, as recorded).
    pub startup_error: Option<String>,
}

/// Why a replay failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayFailure {
    /// The recording could not be read or parsed.
    Parse(ParseError),
    /// A call differed, was missing or was left over.
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The first difference.
        mismatch: Mismatch,
        /// Calls matched before it.
        calls: usize,
    },
    /// The recording's `cycle` line does not follow the runtime's count.
    CycleNumber {
        /// The file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// The `k` the line says.
        recorded: u64,
        /// The runtime's next cycle.
        runtime: u64,
    },
}

impl fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayFailure::Parse(e) => write!(f, "{e}"),
            ReplayFailure::Mismatch { path, mismatch, calls } => {
                write!(f, "{}:{mismatch} (after {calls} calls matched)", path.display())
            }
            ReplayFailure::CycleNumber { path, line, recorded, runtime } => write!(
                f,
                "{}: line {line}: the recording says cycle {recorded}, the runtime is at cycle {runtime}; cycle lines must count up from 0 by 1",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ReplayFailure {}

/// Reads the recording at `path` and replays it.
pub fn replay_file(path: &Path) -> Result<ReplayReport, ReplayFailure> {
    let start = Instant::now();
    let lines = recording::read_file(path).map_err(ReplayFailure::Parse)?;
    let mut report = replay_lines(lines, path)?;
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Ms to the cycle clock's ns.
const NS_PER_MS: u64 = 1_000_000;

/// The inputs of the recording as they stand.
struct Inputs {
    accepted: Vec<u8>,
    armed: bool,
    /// The virtual switch's armed -> tripped transitions.
    trip_count: u64,
    command: Option<Command>,
}

impl Inputs {
    /// Trips the virtual switch; counts the trip when it finds it armed.
    fn trip(&mut self) {
        if self.armed {
            self.trip_count = self.trip_count.wrapping_add(1);
        }
        self.armed = false;
    }

    /// Applies an input or setting line; false for a call or cycle line.
    fn apply(&mut self, item: &Item) -> bool {
        match item {
            Item::Accepted(v) => self.accepted = v.clone(),
            Item::SwitchArmed(a) => self.armed = *a,
            Item::Command(c) => self.command = Some(**c),
            Item::Silence => self.command = None,
            Item::Trip(_) => self.trip(),
            Item::Rearm => self.armed = true,
            // The recorded commands are the ones the runtime's wake latch
            // let through, so a recording made by `nao-rs record` replays
            // byte for byte without running the latch; running it for a
            // hand-written recording with `wake` lines is the one-gate
            // change (issue 19).
            Item::Wake => {}
            // Driven by the gate.
            Item::BringUp { .. } | Item::Jog(_) => {}
            Item::Cycle { .. } | Item::Call(_) => return false,
        }
        true
    }
}

/// Replays parsed lines; `path` only names the file in the report.
pub fn replay_lines(lines: Vec<Line>, path: &Path) -> Result<ReplayReport, ReplayFailure> {
    let start = Instant::now();
    let mut link = ReplayLink::new(lines);
    let mut inputs = Inputs {
        accepted: DEFAULT_ACCEPTED.to_vec(),
        armed: true,
        trip_count: 0,
        command: None,
    };
    let mismatch = |link: &ReplayLink| ReplayFailure::Mismatch {
        path: path.to_path_buf(),
        mismatch: link.mismatch().cloned().unwrap_or_else(|| Mismatch {
            line: link.end_line(),
            expected: "?".into(),
            actual: "?".into(),
            offset: None,
        }),
        calls: link.matched(),
    };
    // Settings and inputs before the first call.
    while let Some(l) = link.peek() {
        if !inputs.apply(&l.item) {
            break;
        }
        link.advance();
    }
    let mut cycles = 0u64;
    let mut startup_error = None;
    match Startup::run(&mut link) {
        Err(_) if link.mismatch().is_some() => return Err(mismatch(&link)),
        Err(e) => startup_error = Some(e),
        Ok(identity) => {
            let mut cycle = Cycle::from_identity(&identity, &inputs.accepted);
            cycle.set_initial_trip_count(inputs.trip_count);
            // (k, t_ms) of a cycle line whose calls have not run yet.
            let mut pending: Option<(u64, u64)> = None;
            loop {
                let next = link.peek().map(|l| (l.number, kind(&l.item)));
                match next {
                    Some((number, Kind::Cycle { k, t_ms })) => {
                        if let Some((_, t)) = pending.take() {
                            run_one(&mut cycle, &mut link, &mut inputs, t);
                            cycles += 1;
                            if link.mismatch().is_some() {
                                return Err(mismatch(&link));
                            }
                        }
                        if k != cycle.k() {
                            return Err(ReplayFailure::CycleNumber {
                                path: path.to_path_buf(),
                                line: number,
                                recorded: k,
                                runtime: cycle.k(),
                            });
                        }
                        pending = Some((k, t_ms));
                        link.advance();
                    }
                    Some((_, Kind::Input)) => {
                        if let Some(l) = link.peek() {
                            inputs.apply(&l.item);
                        }
                        link.advance();
                    }
                    Some((_, Kind::Call)) if pending.is_some() => {
                        let (_, t) = pending.take().unwrap_or_default();
                        run_one(&mut cycle, &mut link, &mut inputs, t);
                        cycles += 1;
                        if link.mismatch().is_some() {
                            return Err(mismatch(&link));
                        }
                    }
                    Some(_) | None => break,
                }
            }
            // A `cycle` line with no call after it follows the runtime's
            // last call: an input line, not run.
        }
    }
    // The runtime's stop: after its last cycle it closes the board. A
    // recording of a whole session (`nao-rs record`) ends with that close.
    if startup_error.is_none() {
        if let Some(Line {
            item: Item::Call(Recorded::Close),
            ..
        }) = link.peek()
        {
            link.close();
            if link.mismatch().is_some() {
                return Err(mismatch(&link));
            }
        }
    }
    // Input lines after the runtime's last call are not calls; a call line
    // left is one the runtime did not make.
    while link
        .peek()
        .is_some_and(|l| !matches!(l.item, Item::Call(_)))
    {
        link.advance();
    }
    if let Some(l) = link.peek() {
        let m = Mismatch {
            line: l.number,
            expected: match &l.item {
                Item::Call(c) => c.to_string(),
                _ => "an input line".into(),
            },
            actual: match &startup_error {
                Some(e) => format!("no call (start-up ended: {e})"),
                None => "no call".into(),
            },
            offset: None,
        };
        link.set_mismatch(m);
        return Err(mismatch(&link));
    }
    Ok(ReplayReport {
        path: path.to_path_buf(),
        calls: link.matched(),
        cycles,
        elapsed: start.elapsed(),
        startup_error: startup_error.map(|e: StartupError| e.to_string()),
    })
}

fn run_one(cycle: &mut Cycle, link: &mut ReplayLink, inputs: &mut Inputs, t_ms: u64) {
    let input = CycleInput {
        command: inputs.command.as_ref(),
        tripped: !inputs.armed,
        page_lost: false,
        trip_count: inputs.trip_count,
    };
    let out = cycle.run(link, &input, t_ms.saturating_mul(NS_PER_MS));
    if out.trips.any() {
        inputs.trip();
    }
}

/// The kind of a line, without its data.
enum Kind {
    Cycle { k: u64, t_ms: u64 },
    Input,
    Call,
}

fn kind(item: &Item) -> Kind {
    match item {
        Item::Cycle { k, t_ms } => Kind::Cycle { k: *k, t_ms: *t_ms },
        Item::Call(_) => Kind::Call,
        _ => Kind::Input,
    }
}
