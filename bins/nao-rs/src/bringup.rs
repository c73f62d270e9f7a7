//! `nao-rs bringup`: the first motion of a robot with a person present, one
//! joint at a time (`docs/bringup.md`).
//!
//! Hosts the runtime with its gate in bring-up mode (the runtime's
//! `Config.bringup`: every controller, LoLA client or API call is ignored;
//! only this terminal's jog steps move the one joint, within the bring-up
//! rules of `nao_wire::protocol::bringup`) and an interactive terminal: it
//! shows the joint's measured position, target, current and temperature,
//! the first missing precondition with what to do, the stiffness and the
//! trips, and takes the person's keys (`+`/`-` or the arrow keys: one jog
//! step; `q`: quit). Every session is recorded
//! (`bringup-<date>T<time>-<joint>.rec`, UTC).
//!
//! The pure parts, unit-tested here: the options ([`plan`]), the key parser
//! ([`KeyParser`]), the script parser ([`parse_script`]), the screen
//! ([`Screen`]), the trip log ([`TripLog`]), the recording's name
//! ([`recording_name`]) and the session loop over any [`BringUpRuntime`]
//! ([`run_session`]). The runtime's side is [`RuntimeSession`].

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

use nao_runtime::SensorFrame;
use nao_runtime::{Config, CycleHook, Handle, Reason, Runtime};
use nao_wire::link::Link;
use nao_wire::protocol::bringup::{BringUpLimits, BringUpVerdict, Jog, Limit, Missing, Tighter};
use nao_wire::protocol::handshake::check_accepted;
use nao_wire::recording::record_link::RecordingLink;
use nao_wire::recording::RecordingWriter;
use nao_wire::step::Observed;
use nao_wire::Joint;

use crate::record::InputRecorder;
use crate::run::{abandon, open_link, Host, HostArgs, Serving};

// ----------------------------------------------------------------- options

/// Options of `nao-rs bringup`.
#[derive(clap::Args, Debug)]
pub struct BringupArgs {
    /// The one joint to bring up, by its LoLA name (`LShoulderPitch`).
    #[arg(long)]
    pub joint: String,
    /// The link, page, stop, wake, priority and accepted versions (the
    /// joint's board must be among them).
    #[command(flatten)]
    pub host: HostArgs,
    /// The directory the session's recording is written to
    /// (`bringup-<UTC date>T<time>-<joint>.rec`).
    #[arg(long, default_value = ".")]
    pub record: PathBuf,
    /// Serve LoLA on this socket during the session (a team's framework
    /// keeps its sensor frames; the gate ignores every command it sends:
    /// only this terminal's jog steps move the joint). Default: no LoLA.
    #[arg(long)]
    pub lola_socket: Option<PathBuf>,
    /// Take the keys from FILE (`-`: standard input), one timed step a line
    /// (`<ms since start> <+|-|q>`), instead of the keyboard; prints one
    /// line per change instead of the screen (for tests).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The bring-up limits, each only tighter than its bound.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// One `--<limit-name> VALUE` option per bring-up [`Limit`] (its
/// `Limit::name`), the values as given (checked by [`plan`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitArgs {
    /// The limits given, in [`Limit::ALL`]'s order.
    pub given: Vec<(Limit, String)>,
}

impl clap::FromArgMatches for LimitArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = Limit::ALL
            .into_iter()
            .filter_map(|l| m.get_one::<String>(l.name()).map(|v| (l, v.clone())))
            .collect();
        Ok(LimitArgs { given })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for LimitArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Limit::ALL.into_iter().fold(cmd, |cmd, l| {
            let (lo, hi) = l.allowed();
            let unit = l.unit();
            let value_name = if unit.is_empty() { "VALUE" } else { unit };
            cmd.arg(
                clap::Arg::new(l.name())
                    .long(l.name())
                    .value_name(value_name)
                    .allow_hyphen_values(true)
                    .help(format!(
                        "Bring-up limit {} (default {}; only tighter: {})",
                        l.name(),
                        l.default_value(),
                        match l.tighter() {
                            Tighter::Lower if lo >= 1.0 => format!("a whole number {lo}..={hi}"),
                            Tighter::Lower => format!("above {lo}, at most {hi}"),
                            Tighter::Higher => format!("at least {lo}, at most {hi}"),
                        }
                    )),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// What a session runs: the checked options.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The one joint.
    pub joint: Joint,
    /// The limits, each its bound or tighter.
    pub limits: BringUpLimits,
}

/// Checks the options: the joint by its name, the accepted versions, every
/// limit only tighter (`BringUpLimits::tighten`). Errors name the option,
/// the value and the bound or what is allowed.
pub fn plan(joint: &str, accepted: &[u8], limits: &LimitArgs) -> Result<Plan, String> {
    let j = Joint::from_name(joint).ok_or_else(|| {
        let names: Vec<&str> = Joint::ALL.iter().map(|j| j.name()).collect();
        let hint = Joint::ALL
            .iter()
            .find(|j| j.name().eq_ignore_ascii_case(joint))
            .map(|j| format!("did you mean {}? ", j.name()))
            .unwrap_or_default();
        format!(
            "--joint {joint:?} is not a joint: {hint}give its LoLA name, one of {}",
            names.join(", ")
        )
    })?;
    check_accepted(accepted).map_err(|e| format!("--accepted: {e}"))?;
    let mut l = BringUpLimits::default();
    for (limit, text) in &limits.given {
        let name = limit.name();
        let v = finite_decimal(text).ok_or_else(|| {
            format!(
                "--{name} {text:?} is not a number (give a decimal number, e.g. --{name} {})",
                limit.bound()
            )
        })?;
        l = l.tighten(*limit, v).map_err(|e| format!("--{name}: {e}"))?;
    }
    Ok(Plan {
        joint: j,
        limits: l,
    })
}

/// `s` as a finite decimal number (digits, sign, `.`, exponent), else None.
fn finite_decimal(s: &str) -> Option<f64> {
    let decimal = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        && s.bytes().any(|b| b.is_ascii_digit());
    s.parse::<f64>().ok().filter(|v| decimal && v.is_finite())
}

// -------------------------------------------------------------------- keys

/// What a key press asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// One jog step.
    Jog(Jog),
    /// End the session.
    Quit,
}

/// Turns terminal bytes into keys: `+` and the up and right arrows jog
/// plus, `-` and the down and left arrows jog minus, `q`, `Q`, Ctrl-C and
/// Ctrl-D quit; every other byte (and escape sequence) is ignored. Arrow
/// keys come as `ESC [ A` (or `ESC O A`, parameters such as `ESC [ 1 ; 2 A`
/// allowed), possibly split over reads: the parser keeps its state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyParser {
    state: EscState,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum EscState {
    #[default]
    Ground,
    Escape,
    Sequence,
}

impl KeyParser {
    /// The key that `byte` completes, if any.
    pub fn feed(&mut self, byte: u8) -> Option<Key> {
        match self.state {
            EscState::Ground => match byte {
                b'+' => Some(Key::Jog(Jog::Plus)),
                b'-' => Some(Key::Jog(Jog::Minus)),
                b'q' | b'Q' | 0x03 | 0x04 => Some(Key::Quit),
                0x1b => {
                    self.state = EscState::Escape;
                    None
                }
                _ => None,
            },
            EscState::Escape => match byte {
                b'[' | b'O' => {
                    self.state = EscState::Sequence;
                    None
                }
                0x1b => None,
                _ => {
                    // A lone escape: the byte after it is a key of its own.
                    self.state = EscState::Ground;
                    self.feed(byte)
                }
            },
            EscState::Sequence => match byte {
                b'0'..=b'9' | b';' => None,
                _ => {
                    self.state = EscState::Ground;
                    match byte {
                        b'A' | b'C' => Some(Key::Jog(Jog::Plus)),
                        b'B' | b'D' => Some(Key::Jog(Jog::Minus)),
                        _ => None,
                    }
                }
            },
        }
    }
}

/// One timed step of a `--script`: at `t_ms` after the session's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptStep {
    /// ms since the session started.
    pub t_ms: u64,
    /// The key.
    pub key: Key,
}

/// Parses a `--script`: one step a line, `<t_ms> <key>` with t_ms in
/// decimal ms since the session started, never decreasing, and key `+`,
/// `-`, `up`, `down` or `q` (`quit`); blank lines and `#` comments are
/// skipped. Errors name the 1-based line and the value.
pub fn parse_script(text: &str) -> Result<Vec<ScriptStep>, String> {
    let mut steps: Vec<ScriptStep> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(t), Some(k), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!(
                "line {n}: {line:?} is not `<ms> <key>` (e.g. `500 +`)"
            ));
        };
        let t_ms: u64 = t
            .parse()
            .ok()
            .filter(|_| t.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("line {n}: time {t:?} is not a whole number of ms"))?;
        let key = match k {
            "+" | "up" => Key::Jog(Jog::Plus),
            "-" | "down" => Key::Jog(Jog::Minus),
            "q" | "quit" => Key::Quit,
            _ => {
                return Err(format!(
                    "line {n}: key {k:?} is not one of +, -, up, down, q, quit"
                ))
            }
        };
        if let Some(last) = steps.last() {
            if t_ms < last.t_ms {
                return Err(format!(
                    "line {n}: time {t_ms} ms is before the previous step's {} ms (steps are in time order)",
                    last.t_ms
                ));
            }
        }
        steps.push(ScriptStep { t_ms, key });
    }
    Ok(steps)
}

// ------------------------------------------------------------------ screen

/// What the terminal shows of one cycle: the joint's part of the runtime's
/// latest sensor frame and the gate's bring-up verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// The cycle.
    pub cycle: u64,
    /// The joint's measured position, rad.
    pub position: f32,
    /// Its current, mA.
    pub current_ma: u16,
    /// Its temperature, degC.
    pub temperature_c: i8,
    /// The stiffness sent for it in the cycle's frame, 0..1.
    pub stiffness_sent: f32,
    /// The switch was tripped when the frame was built.
    pub tripped: bool,
    /// The reason in the page, if tripped.
    pub reason: Option<Reason>,
    /// The gate's bring-up verdict of the cycle (`None`: no cycle yet).
    pub verdict: Option<BringUpVerdict>,
}

impl View {
    /// The view of `joint` in `frame`, with the cycle's `verdict`.
    pub fn of(frame: &SensorFrame, joint: Joint, verdict: Option<BringUpVerdict>) -> View {
        let j = joint.index();
        View {
            cycle: frame.cycle,
            position: frame.position[j],
            current_ma: frame.current_ma[j],
            temperature_c: frame.temperature[j],
            stiffness_sent: f32::from(frame.stiffness_sent[j]) / 1000.0,
            tripped: frame.switch.tripped,
            reason: frame.switch.reason,
            verdict,
        }
    }
}

/// The trips seen in a session: every armed-to-tripped change of the
/// switch, with its reason (the gate's bring-up trips land there too).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TripLog {
    /// `(cycle, reason)`, oldest first; `None`: the reason was gone.
    pub trips: Vec<(u64, Option<Reason>)>,
    tripped: Option<bool>,
}

impl TripLog {
    /// Notes `view`'s switch; true when it shows a new trip.
    pub fn observe(&mut self, view: &View) -> bool {
        let new = self.tripped == Some(false) && view.tripped;
        if new {
            self.trips.push((view.cycle, view.reason));
        }
        self.tripped = Some(view.tripped);
        new
    }
}

/// What a trip reason means at the robot, for the screen.
pub fn trip_meaning(reason: Option<Reason>) -> &'static str {
    match reason {
        Some(Reason::BringupWrongDirection) => {
            "the joint moved against the step: a wrong zero, sign or joint mapping; do not go on with this joint"
        }
        Some(Reason::BringupFollowingError) => {
            "the joint did not follow: stuck, blocked, a wrong zero or too little stiffness"
        }
        Some(Reason::BringupOverCurrent) => {
            "the joint drew too much current: blocked, at an end stop or a motor fault"
        }
        Some(Reason::BringupTooHot) => {
            "the joint got too hot while stiff: it works against something; let it cool, limp"
        }
        Some(Reason::ChestButton) => "the chest button was pressed",
        Some(Reason::Naoctl) => "naoctl stop",
        Some(Reason::Udp) => "a UDP stop",
        Some(Reason::Shutdown) => "the runtime is stopping",
        Some(_) => "see docs/page.md for the reason",
        None => "tripped and re-armed between two frames",
    }
}

/// The terminal's screen: pure, the same view gives the same lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Screen {
    /// The joint.
    pub joint: Joint,
    /// The limits (the cap and the step are shown).
    pub limits: BringUpLimits,
    /// Where the session is recorded.
    pub recording: PathBuf,
}

impl Screen {
    /// The full screen of `view` (one string a line).
    pub fn render(&self, view: Option<&View>, trips: &TripLog) -> Vec<String> {
        let mut out = Vec::with_capacity(16);
        out.push(format!(
            "nao-rs bringup: {}   cap {} stiffness, step {} rad   recording {}",
            self.joint,
            self.limits.get(Limit::MaxStiffness),
            self.limits.get(Limit::JogStep),
            self.recording.display()
        ));
        out.push(String::new());
        let Some(v) = view else {
            out.push("waiting for the runtime's first cycle ...".into());
            out.push(String::new());
            out.push(KEYS_HELP.into());
            return out;
        };
        let verdict = v.verdict;
        let target = verdict.map_or(v.position, |d| d.target);
        out.push(format!(
            "  measured  {:+.3} rad ({:+.1} deg)",
            v.position,
            v.position.to_degrees()
        ));
        let window = match verdict.and_then(|d| d.window) {
            Some(w) => format!("   window {:+.3} .. {:+.3} rad", w.min, w.max),
            None => String::new(),
        };
        out.push(format!("  target    {target:+.3} rad{window}"));
        out.push(format!("  current   {} mA", v.current_ma));
        out.push(format!("  temp      {} degC", v.temperature_c));
        out.push(format!(
            "  stiffness {:.3} (gate {:.3})   cycle {}",
            v.stiffness_sent,
            verdict.map_or(0.0, |d| d.stiffness),
            v.cycle
        ));
        out.push(String::new());
        out.push(match (v.tripped, verdict.and_then(|d| d.missing)) {
            (true, _) => format!(
                "  TRIPPED: {}: {}",
                v.reason.map_or("unknown", Reason::name),
                trip_meaning(v.reason)
            ),
            (false, Some(m)) => format!("  waiting: {}: {}", m.name(), m.what_to_do()),
            (false, None) if verdict.is_some() => {
                "  ENABLED: the joint is stiff; release the toe bumper to make it limp".into()
            }
            (false, None) => {
                "  no bring-up verdict: the runtime is not in bring-up mode; nothing moves".into()
            }
        });
        if matches!(
            verdict.and_then(|d| d.missing),
            Some(Missing::SwitchTripped)
        ) || v.tripped
        {
            out.push(format!(
                "           {}",
                Missing::SwitchTripped.what_to_do()
            ));
        }
        out.push(String::new());
        if trips.trips.is_empty() {
            out.push("  trips: none".into());
        } else {
            out.push(format!("  trips: {}", trips.trips.len()));
            for (cycle, reason) in trips.trips.iter().rev().take(5) {
                out.push(format!(
                    "    cycle {cycle}: {} ({})",
                    reason.map_or("unknown", Reason::name),
                    trip_meaning(*reason)
                ));
            }
        }
        out.push(String::new());
        out.push(KEYS_HELP.into());
        out
    }

    /// One line of `view` for a log (the script mode): the state that
    /// matters, then the numbers.
    pub fn line(&self, view: &View) -> String {
        let d = view.verdict;
        let mut s = format!("cycle {} ", view.cycle);
        match (view.tripped, d.and_then(|d| d.missing)) {
            (true, _) => {
                let _ = write!(s, "tripped {}", view.reason.map_or("unknown", Reason::name));
            }
            (false, Some(m)) => {
                let _ = write!(s, "waiting {}", m.name());
            }
            (false, None) if d.is_some() => s.push_str("enabled"),
            (false, None) => s.push_str("no-verdict"),
        }
        let _ = write!(
            s,
            " stiffness {:.3} position {:+.3} target {:+.3} current {} temp {}",
            view.stiffness_sent,
            view.position,
            d.map_or(view.position, |d| d.target),
            view.current_ma,
            view.temperature_c
        );
        s
    }

    /// What changes the line's state: printed in the script mode when it
    /// changes.
    fn state(view: &View) -> (bool, Option<&'static str>, bool, bool) {
        let d = view.verdict;
        (
            view.tripped,
            d.and_then(|d| d.missing).map(Missing::name),
            d.is_some_and(|d| d.stiffness > 0.0),
            d.is_some(),
        )
    }
}

const KEYS_HELP: &str = "  keys: + or up/right arrow: step plus   - or down/left arrow: step minus   q: quit (limp, stop)";

// ----------------------------------------------------------------- session

/// What the session loop needs of the runtime.
pub trait BringUpRuntime {
    /// Hands one jog step to the next cycle's gate.
    fn jog(&self, jog: Jog);
    /// The latest cycle's view (`None` before the first cycle).
    fn view(&self) -> Option<View>;
    /// True until the runtime's cycle has ended.
    fn is_running(&self) -> bool;
    /// Asks the runtime to stop (limp, all-off, closes the board).
    fn request_stop(&self);
}

/// How the session shows itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Redraw the whole screen (a terminal).
    Screen,
    /// One line for each change of state and each key (a script, a log).
    Lines,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEnd {
    /// `q` (or the end of the keys), rather than the runtime stopping.
    pub quit: bool,
    /// The jog steps handed to the runtime.
    pub jogs: u64,
    /// The trips seen.
    pub trips: TripLog,
}

/// The screen refresh period.
pub const REFRESH: Duration = Duration::from_millis(100);

/// Runs the terminal side of a session: hands each jog key to `rt`, shows
/// the view every `refresh` (or at each key), until `q`, the end of the
/// keys (the channel closed) or the runtime stopping; then asks `rt` to
/// stop. Write errors to `out` are ignored (the robot must not depend on a
/// terminal).
pub fn run_session<R: BringUpRuntime + ?Sized>(
    rt: &R,
    screen: &Screen,
    keys: &Receiver<Key>,
    out: &mut dyn Write,
    output: Output,
    refresh: Duration,
) -> SessionEnd {
    let mut trips = TripLog::default();
    let mut jogs = 0;
    let mut last_state = None;
    let mut quit = false;
    while rt.is_running() {
        match keys.recv_timeout(refresh) {
            Ok(Key::Jog(j)) => {
                rt.jog(j);
                jogs += 1;
                if output == Output::Lines {
                    let _ = writeln!(out, "jog {}", nao_wire::recording::jog_word(j));
                }
            }
            Ok(Key::Quit) | Err(RecvTimeoutError::Disconnected) => {
                quit = true;
                break;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let view = rt.view();
        if let Some(v) = &view {
            if trips.observe(v) && output == Output::Lines {
                let _ = writeln!(
                    out,
                    "trip {} ({})",
                    v.reason.map_or("unknown", Reason::name),
                    trip_meaning(v.reason)
                );
            }
        }
        match output {
            Output::Screen => {
                // Clear, home, then the lines.
                let mut text = String::from("\x1b[2J\x1b[H");
                for l in screen.render(view.as_ref(), &trips) {
                    text.push_str(&l);
                    text.push_str("\r\n");
                }
                let _ = out.write_all(text.as_bytes());
            }
            Output::Lines => {
                if let Some(v) = &view {
                    let state = Screen::state(v);
                    if last_state != Some(state) {
                        last_state = Some(state);
                        let _ = writeln!(out, "{}", screen.line(v));
                    }
                }
            }
        }
        let _ = out.flush();
    }
    rt.request_stop();
    SessionEnd { quit, jogs, trips }
}

/// Reads keys from `input` in a thread of its own (a blocking read never
/// holds up the runtime or the screen) and sends them; sends `Quit` at the
/// end of the input or on a read error.
pub fn spawn_key_reader<In: Read + Send + 'static>(
    mut input: In,
    tx: Sender<Key>,
) -> io::Result<std::thread::JoinHandle<()>> {
    nao_kit::actor::thread("nao-rs-keys").spawn(move || {
        let mut parser = KeyParser::default();
        let mut buf = [0u8; 64];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            if n == 0 {
                let _ = tx.send(Key::Quit);
                return;
            }
            for &b in &buf[..n] {
                if let Some(k) = parser.feed(b) {
                    if tx.send(k).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// Sends the script's steps at their times (from now) in a thread of its
/// own; after the last step the channel closes, which ends the session.
pub fn spawn_script(
    steps: Vec<ScriptStep>,
    tx: Sender<Key>,
) -> io::Result<std::thread::JoinHandle<()>> {
    nao_kit::actor::thread("nao-rs-script").spawn(move || {
        use nao_kit::clock::{Clock, MonotonicClock};
        let t0 = MonotonicClock.now_ns();
        for s in steps {
            MonotonicClock.sleep_until_ns(t0.saturating_add(s.t_ms.saturating_mul(1_000_000)));
            if tx.send(s.key).is_err() {
                return;
            }
        }
    })
}

// ---------------------------------------------------------------- terminal

/// The terminal's settings before raw mode, for the panic hook.
static SAVED_TERMINAL: Mutex<Option<Termios>> = Mutex::new(None);

/// Standard input in raw mode (no line buffering, no echo; signals such as
/// Ctrl-C still arrive as signals and stop the runtime safely) until
/// dropped. A panic restores the terminal too.
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Raw mode on standard input, if it is a terminal.
    pub fn enable() -> Result<RawMode, String> {
        let stdin = io::stdin();
        let saved = termios::tcgetattr(&stdin)
            .map_err(|e| format!("cannot read the terminal's settings (tcgetattr): {e}"))?;
        let mut raw = saved.clone();
        raw.local_flags
            .remove(LocalFlags::ICANON | LocalFlags::ECHO);
        raw.control_chars[termios::SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[termios::SpecialCharacterIndices::VTIME as usize] = 0;
        if let Ok(mut s) = SAVED_TERMINAL.lock() {
            *s = Some(saved.clone());
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_saved_terminal();
            previous(info);
        }));
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw)
            .map_err(|e| format!("cannot put the terminal in raw mode (tcsetattr): {e}"))?;
        Ok(RawMode { saved })
    }
}

fn restore_saved_terminal() {
    if let Ok(s) = SAVED_TERMINAL.try_lock() {
        if let Some(t) = s.as_ref() {
            let _ = termios::tcsetattr(io::stdin(), SetArg::TCSANOW, t);
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(io::stdin(), SetArg::TCSANOW, &self.saved);
        if let Ok(mut s) = SAVED_TERMINAL.lock() {
            *s = None;
        }
    }
}

// --------------------------------------------------------------- recording

/// The session's recording name: `bringup-<YYYY-MM-DD>T<HH-MM-SS>-<joint>.rec`,
/// the time in UTC (`-` for `:`, which some file systems refuse).
pub fn recording_name(unix_secs: u64, joint: Joint) -> String {
    let days = unix_secs / 86_400;
    let s = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "bringup-{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}-{}.rec",
        s / 3600,
        s / 60 % 60,
        s % 60,
        joint.name()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Creates the session's recording in `dir` (which must exist): the name of
/// [`recording_name`], with `-2`, `-3`, ... before `.rec` if taken.
pub fn create_recording(
    dir: &Path,
    joint: Joint,
    unix_secs: u64,
) -> Result<(PathBuf, File), String> {
    if !dir.is_dir() {
        return Err(format!(
            "--record {}: not a directory; create it or give the directory to record the session in",
            dir.display()
        ));
    }
    let name = recording_name(unix_secs, joint);
    let stem = name.trim_end_matches(".rec");
    for n in 1..=99 {
        let path = if n == 1 {
            dir.join(&name)
        } else {
            dir.join(format!("{stem}-{n}.rec"))
        };
        match File::options().write(true).create_new(true).open(&path) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create the recording {}: {e} (check that the directory is writable)",
                    path.display()
                ))
            }
        }
    }
    Err(format!(
        "cannot create the recording in {}: {name} and 98 numbered names exist; move them away",
        dir.display()
    ))
}

/// The link a bring-up session runs on: every call recorded.
pub type Rec = RecordingLink<Box<dyn Link>, BufWriter<File>>;

/// The recorder of a bring-up session: the input lines of `nao-rs record`
/// and, before each cycle's calls, the jog step its gate took.
#[derive(Default)]
pub struct BringUpRecorder {
    inputs: InputRecorder,
}

impl CycleHook<Rec> for BringUpRecorder {
    fn before_startup(&mut self, link: &mut Rec, accepted: &[u8], armed: bool) {
        self.inputs.before_startup(link, accepted, armed);
    }

    fn before_cycle(&mut self, link: &mut Rec, inputs: &Observed<'_>) {
        self.inputs.before_cycle(link, inputs);
        runtime_api::record_jog(link, inputs);
    }
}

// ----------------------------------------------------------------- runtime

/// The runtime's side of a session: [`BringUpRuntime`] over its [`Handle`].
pub struct RuntimeSession {
    handle: Handle,
    joint: Joint,
}

impl BringUpRuntime for RuntimeSession {
    fn jog(&self, jog: Jog) {
        runtime_api::jog(&self.handle, jog);
    }

    fn view(&self) -> Option<View> {
        // Relaxed: display only (0: no cycle has published a frame yet).
        if self.handle.status().cycles.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let frame = self.handle.latest_sensors();
        Some(View::of(&frame, self.joint, runtime_api::verdict(&frame)))
    }

    fn is_running(&self) -> bool {
        self.handle.is_running()
    }

    fn request_stop(&self) {
        self.handle.request_stop();
    }
}

/// The runtime's bring-up API (`nao_runtime::Config.bringup`,
/// `Handle::jog`, `SensorFrame.bringup`, the jog the step took in its
/// input, `RecordingLink::jog`) as this command uses it.
mod runtime_api {
    use super::*;

    /// `config` with its gate in bring-up mode for `joint` within `limits`.
    pub fn config(config: Config, joint: Joint, limits: BringUpLimits) -> Result<Config, String> {
        Ok(Config {
            bringup: Some(nao_runtime::BringUpSetup { joint, limits }),
            ..config
        })
    }

    /// Hands `jog` to the next cycle's gate.
    pub fn jog(handle: &Handle, jog: Jog) {
        handle.jog(jog);
    }

    /// The gate's bring-up verdict of `frame`'s cycle.
    pub fn verdict(frame: &SensorFrame) -> Option<BringUpVerdict> {
        frame.bringup
    }

    /// Writes the `jog` line of the step the cycle's gate took, if any.
    pub fn record_jog(link: &mut Rec, seen: &Observed<'_>) {
        if let Some(j) = seen.input.jog {
            let _ = link.jog(j);
        }
    }
}

/// Runs `nao-rs bringup`.
pub fn main(args: BringupArgs) -> Result<(), String> {
    let plan = plan(&args.joint, &args.host.accepted, &args.limits)?;
    let script = match &args.script {
        None => None,
        Some(p) => {
            let text = if p.as_os_str() == "-" {
                let mut s = String::new();
                io::stdin()
                    .read_to_string(&mut s)
                    .map_err(|e| format!("--script -: cannot read standard input: {e}"))?;
                s
            } else {
                std::fs::read_to_string(p).map_err(|e| {
                    format!(
                        "--script {}: cannot read it: {e} (check the path)",
                        p.display()
                    )
                })?
            };
            Some(parse_script(&text).map_err(|e| format!("--script {}: {e}", p.display()))?)
        }
    };
    let host = Host::open(&args.host)?;
    // Bound before the runtime starts, as the wake socket.
    let mut lola = match &args.lola_socket {
        Some(p) => {
            let mut c = nao_runtime::lola::LolaConfig::new(nao_kit::log::stderr_logger());
            c.socket = p.clone();
            Some(nao_runtime::lola::LolaServer::bind(c).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let unix_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (rec_path, file) = create_recording(&args.record, plan.joint, unix_secs)?;
    let mut writer = RecordingWriter::new(BufWriter::new(file))
        .map_err(|e| format!("cannot write the recording {}: {e}", rec_path.display()))?;
    writer
        .bringup(plan.joint, &plan.limits)
        .map_err(|e| format!("cannot write the recording {}: {e}", rec_path.display()))?;
    let link = RecordingLink::with_writer(open_link(&args.host.link)?, writer);
    let config = runtime_api::config(args.host.config(&host.page_path), plan.joint, plan.limits)?;
    let board = host.board.clone();
    let (rt, io_) = Runtime::start_with_hook(link, board, config, BringUpRecorder::default())
        .map_err(|e| e.to_string())?;
    let Serving {
        rt,
        handle,
        wake: _wake,
    } = host.serve(rt)?;
    // During bring-up the gate ignores every controller: the program side
    // is kept, unused, or serves LoLA (its commands ignored too).
    let _io = match lola.take() {
        Some(mut server) => {
            crate::run::describe_robot(&mut server, rt.identity(), rt.logger());
            let served = nao_kit::actor::thread("nao-rs-lola")
                .stack_size(nao_runtime::lola::SERVER_STACK_BYTES)
                .spawn(move || nao_runtime::lola::serve_runtime_on(server, io_));
            if let Err(e) = served {
                return abandon(rt, format!("cannot start the LoLA thread: {e}"));
            }
            None
        }
        None => Some(io_),
    };
    let session = RuntimeSession {
        handle: handle.clone(),
        joint: plan.joint,
    };
    let screen = Screen {
        joint: plan.joint,
        limits: plan.limits,
        recording: rec_path.clone(),
    };
    let (tx, rx) = mpsc::channel();
    let interactive = script.is_none() && io::stdin().is_terminal() && io::stdout().is_terminal();
    let started = match script {
        Some(steps) => spawn_script(steps, tx)
            .map(|_| None)
            .map_err(|e| e.to_string()),
        None if interactive => match RawMode::enable() {
            Ok(raw) => spawn_key_reader(io::stdin(), tx)
                .map(|_| Some(raw))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        None => spawn_key_reader(io::stdin(), tx)
            .map(|_| None)
            .map_err(|e| e.to_string()),
    };
    let raw = match started {
        Ok(raw) => raw,
        Err(e) => return abandon(rt, format!("cannot read the keys: {e}")),
    };
    let output = if interactive {
        Output::Screen
    } else {
        Output::Lines
    };
    let mut stdout = io::stdout();
    let outcome = run_session(&session, &screen, &rx, &mut stdout, output, REFRESH);
    drop(raw);
    let (link, summary) = rt.wait();
    let link = link.ok_or("the cycle panicked; the recording is incomplete")?;
    link.finish()
        .map_err(|e| format!("writing {} failed: {e}", rec_path.display()))?;
    println!(
        "bring-up of {} ended ({}): {} cycles, {} jog steps, {} trips; recorded to {}",
        plan.joint,
        if outcome.quit {
            "quit"
        } else {
            "the runtime stopped"
        },
        summary.cycles,
        outcome.jogs,
        outcome.trips.trips.len(),
        rec_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn limits(given: &[(Limit, &str)]) -> LimitArgs {
        LimitArgs {
            given: given.iter().map(|(l, v)| (*l, v.to_string())).collect(),
        }
    }

    #[test]
    fn plan_takes_the_joint_accepted_versions_and_tighter_limits() {
        let p = plan(
            "LShoulderPitch",
            &[10, 11],
            &limits(&[(Limit::MaxStiffness, "0.1"), (Limit::JogStep, "0.02")]),
        )
        .unwrap();
        assert_eq!(p.joint, Joint::LShoulderPitch);
        assert_eq!(p.limits.get(Limit::MaxStiffness), 0.1);
        assert_eq!(p.limits.get(Limit::JogStep), 0.02);
        assert_eq!(p.limits.get(Limit::Window), Limit::Window.default_value());
        // The cap may go up to its bound 0.3.
        let p = plan("HeadYaw", &[10], &limits(&[(Limit::MaxStiffness, "0.3")])).unwrap();
        assert_eq!(p.limits.get(Limit::MaxStiffness), 0.3);
    }

    #[test]
    fn plan_errors_name_the_value_and_the_bound() {
        for (joint, accepted, given, want) in [
            (
                "LShoulder",
                vec![10],
                vec![],
                "\"LShoulder\" is not a joint",
            ),
            (
                "lshoulderpitch",
                vec![10],
                vec![],
                "did you mean LShoulderPitch?",
            ),
            ("HeadYaw", vec![], vec![], "--accepted"),
            ("HeadYaw", vec![10, 10], vec![], "--accepted"),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::MaxStiffness, "0.5")],
                "0.5 is not allowed",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::MaxStiffness, "0.5")],
                "at most 0.3",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::Window, "0.4")],
                "--window: bring-up limit window: 0.4 rad",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::Rate, "-1")],
                "--rate: bring-up limit rate: -1",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::Ramp, "0.5")],
                "at least 1 s",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::OverCurrentCycles, "2.5")],
                "whole number",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::JogStep, "fast")],
                "--jog-step \"fast\" is not a number",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::JogStep, "nan")],
                "is not a number",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::JogStep, "inf")],
                "is not a number",
            ),
            (
                "HeadYaw",
                vec![10],
                vec![(Limit::JogStep, "1e999")],
                "is not a number",
            ),
        ] {
            let e = plan(joint, &accepted, &limits(&given)).unwrap_err();
            assert!(e.contains(want), "{joint} {accepted:?} {given:?}: {e}");
        }
    }

    #[test]
    fn every_limit_is_an_option_named_after_it() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: BringupArgs,
        }
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "x",
            "--joint",
            "HeadYaw",
            "--window",
            "0.2",
            "--jog-step",
            "0.01",
            "--max-stiffness",
            "-3",
        ])
        .unwrap();
        assert_eq!(
            cli.args.limits,
            limits(&[
                (Limit::MaxStiffness, "-3"),
                (Limit::Window, "0.2"),
                (Limit::JogStep, "0.01")
            ])
        );
        for l in Limit::ALL {
            assert!(
                Cli::command()
                    .get_arguments()
                    .any(|a| a.get_long() == Some(l.name())),
                "--{}",
                l.name()
            );
        }
    }

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut p = KeyParser::default();
        bytes.iter().filter_map(|&b| p.feed(b)).collect()
    }

    #[test]
    fn keys_plus_minus_and_arrows_jog_q_quits_the_rest_is_ignored() {
        use Jog::{Minus, Plus};
        assert_eq!(
            keys(b"+-x q"),
            vec![Key::Jog(Plus), Key::Jog(Minus), Key::Quit]
        );
        assert_eq!(
            keys(b"\x1b[A\x1b[B\x1b[C\x1b[D\x1bOA\x1b[1;2B"),
            [Plus, Minus, Plus, Minus, Plus, Minus]
                .map(Key::Jog)
                .to_vec()
        );
        // Other sequences (F5, Home) and a lone escape do nothing; the byte
        // after a lone escape counts.
        assert_eq!(keys(b"\x1b[15~\x1b[H\x1b+"), vec![Key::Jog(Plus)]);
        assert_eq!(keys(b"\x03"), vec![Key::Quit]);
        assert_eq!(keys(b"\x04"), vec![Key::Quit]);
        assert_eq!(keys(b"Q"), vec![Key::Quit]);
        assert_eq!(keys(b"\r\n jk"), vec![]);
    }

    #[test]
    fn keys_split_over_reads_are_one_key() {
        let mut p = KeyParser::default();
        assert_eq!(p.feed(0x1b), None);
        assert_eq!(p.feed(b'['), None);
        assert_eq!(p.feed(b'A'), Some(Key::Jog(Jog::Plus)));
        // Arbitrary bytes never panic and leave the parser usable.
        for b in 0..=255u8 {
            let _ = p.feed(b);
        }
        let _ = p.feed(b'x');
        assert_eq!(p.feed(b'-'), Some(Key::Jog(Jog::Minus)));
    }

    #[test]
    fn script_steps_are_timed_keys_in_order() {
        let s = parse_script("# a session\n0 +\n\n500 up\n500 -\n900 down\n1200 q\n").unwrap();
        use Jog::{Minus, Plus};
        let want = [
            (0, Key::Jog(Plus)),
            (500, Key::Jog(Plus)),
            (500, Key::Jog(Minus)),
            (900, Key::Jog(Minus)),
            (1200, Key::Quit),
        ]
        .map(|(t_ms, key)| ScriptStep { t_ms, key });
        assert_eq!(s, want);
        for (text, want) in [
            ("+\n", "line 1: \"+\" is not `<ms> <key>`"),
            ("0 + +\n", "line 1"),
            (
                "10 +\n5 -\n",
                "line 2: time 5 ms is before the previous step's 10 ms",
            ),
            ("-5 +\n", "line 1: time \"-5\" is not a whole number"),
            ("1e3 +\n", "not a whole number"),
            ("99999999999999999999999 +\n", "not a whole number"),
            ("0 left\n", "line 1: key \"left\" is not one of"),
        ] {
            let e = parse_script(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn recording_name_is_the_utc_date_and_time_and_the_joint() {
        assert_eq!(
            recording_name(0, Joint::HeadYaw),
            "bringup-1970-01-01T00-00-00-HeadYaw.rec"
        );
        // 2026-12-03T12:00:00Z.
        assert_eq!(
            recording_name(1_796_299_200, Joint::LShoulderPitch),
            "bringup-2026-12-03T12-00-00-LShoulderPitch.rec"
        );
        // A leap day, the last second of a day.
        assert_eq!(
            recording_name(951_868_799, Joint::RHand),
            "bringup-2000-02-29T23-59-59-RHand.rec"
        );
    }

    #[test]
    fn recordings_are_never_overwritten_and_the_directory_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = create_recording(dir.path(), Joint::HeadYaw, 0).unwrap();
        let (b, _) = create_recording(dir.path(), Joint::HeadYaw, 0).unwrap();
        assert_eq!(
            a.file_name().unwrap(),
            "bringup-1970-01-01T00-00-00-HeadYaw.rec"
        );
        assert_eq!(
            b.file_name().unwrap(),
            "bringup-1970-01-01T00-00-00-HeadYaw-2.rec"
        );
        let e = create_recording(&dir.path().join("nope"), Joint::HeadYaw, 0).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
    }

    fn verdict(missing: Option<Missing>, stiffness: f32) -> BringUpVerdict {
        BringUpVerdict {
            joint: Joint::LShoulderPitch,
            stiffness,
            target: 0.25,
            window: None,
            missing,
            trip: None,
        }
    }

    fn view(cycle: u64, verdict: Option<BringUpVerdict>) -> View {
        View {
            cycle,
            position: 0.2,
            current_ma: 120,
            temperature_c: 35,
            stiffness_sent: verdict.map_or(0.0, |d| d.stiffness),
            tripped: false,
            reason: None,
            verdict,
        }
    }

    fn screen() -> Screen {
        Screen {
            joint: Joint::LShoulderPitch,
            limits: BringUpLimits::default(),
            recording: PathBuf::from("r.rec"),
        }
    }

    #[test]
    fn screen_shows_the_joint_numbers_and_the_missing_precondition_with_what_to_do() {
        let v = view(7, Some(verdict(Some(Missing::NotLying), 0.0)));
        let text = screen().render(Some(&v), &TripLog::default()).join("\n");
        for want in [
            "LShoulderPitch",
            "cap 0.2 stiffness",
            "measured  +0.200 rad (+11.5 deg)",
            "target    +0.250 rad",
            "current   120 mA",
            "temp      35 degC",
            "stiffness 0.000",
            "waiting: not-lying: lay the robot down",
            "trips: none",
            "q: quit",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let v = view(8, Some(verdict(None, 0.1)));
        let text = screen().render(Some(&v), &TripLog::default()).join("\n");
        assert!(text.contains("ENABLED"), "{text}");
        assert!(text.contains("stiffness 0.100 (gate 0.100)"), "{text}");
        let text = screen().render(None, &TripLog::default()).join("\n");
        assert!(
            text.contains("waiting for the runtime's first cycle"),
            "{text}"
        );
        let text = screen()
            .render(Some(&view(9, None)), &TripLog::default())
            .join("\n");
        assert!(text.contains("not in bring-up mode"), "{text}");
    }

    #[test]
    fn screen_shows_each_trip_with_what_it_means() {
        let mut trips = TripLog::default();
        let mut v = view(1, Some(verdict(None, 0.2)));
        assert!(!trips.observe(&v));
        v.cycle = 2;
        v.tripped = true;
        v.reason = Some(Reason::BringupWrongDirection);
        v.verdict = Some(verdict(Some(Missing::SwitchTripped), 0.0));
        assert!(trips.observe(&v));
        assert!(!trips.observe(&v), "one trip, seen once");
        let text = screen().render(Some(&v), &trips).join("\n");
        assert!(text.contains("TRIPPED: bringup-wrong-direction"), "{text}");
        assert!(
            text.contains("a wrong zero, sign or joint mapping"),
            "{text}"
        );
        assert!(text.contains("naoctl rearm"), "{text}");
        assert!(text.contains("cycle 2: bringup-wrong-direction"), "{text}");
        assert_eq!(trips.trips, vec![(2, Some(Reason::BringupWrongDirection))]);
        // A switch tripped at the first view is not a trip of this session.
        let mut t = TripLog::default();
        assert!(!t.observe(&v));
    }

    /// A runtime that plays its views, one a call, stops by itself after
    /// the last, and notes what it is asked.
    struct Fake {
        views: RefCell<Vec<View>>,
        jogs: RefCell<Vec<Jog>>,
        stopped: RefCell<bool>,
    }

    impl Fake {
        fn new(views: Vec<View>) -> Fake {
            Fake {
                views: RefCell::new(views),
                jogs: RefCell::new(vec![]),
                stopped: RefCell::new(false),
            }
        }
    }

    impl BringUpRuntime for Fake {
        fn jog(&self, jog: Jog) {
            self.jogs.borrow_mut().push(jog);
        }
        fn view(&self) -> Option<View> {
            let mut v = self.views.borrow_mut();
            (!v.is_empty()).then(|| v.remove(0))
        }
        fn is_running(&self) -> bool {
            !*self.stopped.borrow() && !self.views.borrow().is_empty()
        }
        fn request_stop(&self) {
            *self.stopped.borrow_mut() = true;
        }
    }

    impl Fake {
        /// A session over this runtime fed `keys`, their channel then
        /// closed or (`open`) held open: how it ended and what it wrote.
        fn session(&self, keys: &[Key], open: bool, output: Output) -> (SessionEnd, String) {
            let (tx, rx) = mpsc::channel();
            for &k in keys {
                tx.send(k).unwrap();
            }
            let _held = open.then_some(tx);
            let mut out = Vec::new();
            let o = run_session(self, &screen(), &rx, &mut out, output, Duration::ZERO);
            (o, String::from_utf8(out).unwrap())
        }
    }

    #[test]
    fn session_quit_stops_the_runtime() {
        let rt = Fake::new(vec![view(1, None), view(2, None)]);
        let (o, _) = rt.session(&[Key::Quit], true, Output::Lines);
        assert!(o.quit);
        assert!(*rt.stopped.borrow(), "quit stops the runtime");
        assert_eq!(rt.views.borrow().len(), 2, "no view after the quit");
    }

    #[test]
    fn session_hands_jogs_to_the_runtime_and_logs_each_change_and_trip() {
        let mut tripped = view(4, Some(verdict(Some(Missing::SwitchTripped), 0.0)));
        tripped.tripped = true;
        tripped.reason = Some(Reason::BringupFollowingError);
        let rt = Fake::new(vec![
            view(1, Some(verdict(Some(Missing::BumperNotHeld), 0.0))),
            view(2, Some(verdict(None, 0.1))),
            view(3, Some(verdict(None, 0.1))),
            tripped,
        ]);
        let keys = [Jog::Plus, Jog::Minus, Jog::Plus].map(Key::Jog);
        let (o, text) = rt.session(&keys, true, Output::Lines);
        assert!(!o.quit, "the runtime stopped");
        assert_eq!(o.jogs, 3);
        assert_eq!(*rt.jogs.borrow(), vec![Jog::Plus, Jog::Minus, Jog::Plus]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "jog +");
        assert!(
            lines[1].starts_with("cycle 1 waiting bumper-not-held"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("cycle 2 enabled stiffness 0.100"),
            "{text}"
        );
        assert!(text.contains("trip bringup-following-error"), "{text}");
        assert!(
            text.contains("cycle 4 tripped bringup-following-error"),
            "{text}"
        );
        assert_eq!(o.trips.trips.len(), 1);
    }

    #[test]
    fn session_ends_when_the_keys_end_or_the_runtime_stops() {
        let rt = Fake::new(vec![view(1, None), view(2, None)]);
        let (o, _) = rt.session(&[], false, Output::Screen);
        assert!(o.quit && *rt.stopped.borrow());
        // A stopped runtime ends the session without a key.
        let (o, _) = rt.session(&[], true, Output::Screen);
        assert!(!o.quit);
    }

    #[test]
    fn key_reader_turns_input_into_keys_and_quits_at_its_end() {
        let (tx, rx) = mpsc::channel();
        spawn_key_reader(io::Cursor::new(b"+\x1b[B".to_vec()), tx)
            .unwrap()
            .join()
            .unwrap();
        let got: Vec<Key> = rx.iter().collect();
        assert_eq!(
            got,
            vec![Key::Jog(Jog::Plus), Key::Jog(Jog::Minus), Key::Quit]
        );
    }

    #[test]
    fn script_sends_its_steps_then_closes() {
        let (tx, rx) = mpsc::channel();
        let steps = parse_script("0 +\n1 -\n").unwrap();
        spawn_script(steps, tx).unwrap().join().unwrap();
        let got: Vec<Key> = rx.iter().collect();
        assert_eq!(got, vec![Key::Jog(Jog::Plus), Key::Jog(Jog::Minus)]);
    }

    #[test]
    fn bringup_config_runs_the_gate_in_bringup_mode_for_the_joint() {
        let limits = BringUpLimits::default()
            .tighten(Limit::Window, 0.1)
            .unwrap();
        let c = runtime_api::config(Config::default(), Joint::HeadYaw, limits).unwrap();
        let b = c.bringup.expect("bring-up mode");
        assert_eq!(b.joint, Joint::HeadYaw);
        assert_eq!(b.limits, limits);
    }
}
