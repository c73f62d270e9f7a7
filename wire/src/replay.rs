//! The replay driver: runs the runtime's own start-up and step
//! ([`Startup::run`], [`Step::run`]: the gate and the protocol core's cycle)
//! over a [`ReplayLink`] with the recording's clock (its `cycle` lines),
//! applying the inputs (`command`, `silence`, `trip`, `rearm`, `wake`,
//! `accepted`, `switch`, `bringup`, `jog`) where they stand, and checks that every call
//! matches and none is left over.
//!
//! The replay's switch is a `deathswitch::MemorySwitch` (the page's own
//! cells and rules, in memory): `switch` sets it, `trip` trips it, `rearm`
//! re-arms it, and a trip raised by an answer trips it (the step does, as
//! on the robot). It counts its armed -> tripped transitions as the page
//! does, so a `trip` and a `rearm` among one cycle's inputs make that
//! cycle's frame tripped. A `wake` line is a person's wake in the switch's
//! generation as it stands; a recording with at least one `wake` line runs
//! the gate's wake latch (limp at the start and after every trip until a
//! wake), one without runs the protocol model (`docs/recording.md`).

use core::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deathswitch::{MemorySwitch, Reason, Switch};

use crate::command::Command;
use crate::command::Joint;
use crate::link::Link;
use crate::protocol::bringup::{BringUp, BringUpLimits, Jog};
use crate::protocol::gate::WakeLatch;
use crate::protocol::handshake::DEFAULT_ACCEPTED;
use crate::protocol::startup::{Startup, StartupError};
use crate::recording::replay_link::{Mismatch, ReplayLink};
use crate::recording::{self, Item, Line, ParseError, Recorded};
use crate::step::{Step, StepInput};

/// A replay that passed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// The file.
    pub(crate) path: PathBuf,
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
///
/// # Errors
///
/// [`ReplayFailure::Parse`] when the file cannot be read or parsed;
/// [`ReplayFailure::Mismatch`] at the first call the replay made that the
/// recording does not hold (or one it holds that was not made);
/// [`ReplayFailure::CycleNumber`] for a `cycle` line that does not follow
/// the runtime's count. A start-up that fails as recorded is no failure:
/// the report holds it.
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
    switch: MemorySwitch,
    command: Option<Command>,
    /// A `wake` line since the last cycle's frame.
    wake: bool,
    /// The `bringup` setting: the session runs in bring-up.
    bringup: Option<(Joint, BringUpLimits)>,
    /// A `jog` line since the last cycle's frame.
    jog: Option<Jog>,
}

impl Inputs {
    /// Applies an input or setting line; false for a call or cycle line.
    fn apply(&mut self, item: &Item) -> bool {
        match item {
            Item::Accepted(v) => self.accepted = v.clone(),
            Item::SwitchArmed(true) => self.switch.rearm(),
            Item::SwitchArmed(false) => {
                self.switch.trip(Reason::Boot);
            }
            Item::Command(c) => self.command = Some(**c),
            Item::Silence => self.command = None,
            Item::Trip(r) => {
                self.switch.trip(r.unwrap_or(Reason::PageLost));
            }
            Item::Rearm => self.switch.rearm(),
            Item::Wake => self.wake = true,
            Item::BringUp { joint, limits } => self.bringup = Some((*joint, *limits)),
            Item::Jog(j) => self.jog = Some(*j),
            Item::Cycle { .. } | Item::Call(_) => return false,
        }
        true
    }
}

/// Replays parsed lines; `path` only names the file in the report (what
/// `nao-rs-usbmon verify` replays an imported capture with).
///
/// # Errors
///
/// As [`replay_file`], but for the parse.
pub fn replay_lines(lines: Vec<Line>, path: &Path) -> Result<ReplayReport, ReplayFailure> {
    let start = Instant::now();
    let wake_latch = if lines.iter().any(|l| matches!(l.item, Item::Wake)) {
        WakeLatch::On
    } else {
        WakeLatch::Off
    };
    let mut link = ReplayLink::new(lines);
    // The replayed runtime registers at its start, as the runtime does
    // (its own wake generation).
    let switch = MemorySwitch::armed();
    switch.register(std::process::id());
    let mut inputs = Inputs {
        accepted: DEFAULT_ACCEPTED.to_vec(),
        switch,
        command: None,
        wake: false,
        bringup: None,
        jog: None,
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
            let start = inputs.switch.read();
            let mut step = Step::new(&identity, &inputs.accepted, &start, wake_latch);
            if let Some((joint, limits)) = inputs.bringup {
                step = step.with_bringup(BringUp::new(joint, limits));
            }
            // (k, t_ms) of a cycle line whose calls have not run yet.
            let mut pending: Option<(u64, u64)> = None;
            loop {
                let next = link.peek().map(|l| (l.number, kind(&l.item)));
                match next {
                    Some((number, Kind::Cycle { k, t_ms })) => {
                        if let Some((_, t)) = pending.take() {
                            run_one(&mut step, &mut link, &mut inputs, t);
                            cycles += 1;
                            if link.mismatch().is_some() {
                                return Err(mismatch(&link));
                            }
                        }
                        if k != step.cycle().k() {
                            return Err(ReplayFailure::CycleNumber {
                                path: path.to_path_buf(),
                                line: number,
                                recorded: k,
                                runtime: step.cycle().k(),
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
                        run_one(&mut step, &mut link, &mut inputs, t);
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

fn run_one(step: &mut Step, link: &mut ReplayLink, inputs: &mut Inputs, t_ms: u64) {
    // A person's wake in the switch's generation as it stands (while
    // tripped there is none: 0, no page's generation, used up as the
    // runtime's would be).
    let wake = std::mem::take(&mut inputs.wake)
        .then(|| inputs.switch.snapshot().wake_generation().unwrap_or(0));
    let input = StepInput {
        command: inputs.command.as_ref(),
        wake,
        jog: inputs.jog.take(),
        now_ns: t_ms.saturating_mul(NS_PER_MS),
        safety_flags: 0,
    };
    step.run(&inputs.switch, link, &input, |_, _| {});
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
