//! The recording reader: text to [`Line`]s, every malformed line rejected
//! with its line number and the reason.
//!
//! Rules (the format in `docs/recording.md`, plus the choices written in
//! `docs/recording.md` where the format is silent):
//! - line 1 is exactly `nao-rs recording 1`;
//! - blank lines and lines whose first character is `#` are skipped;
//! - fields are separated by spaces or tabs; a trailing `\r` (CRLF files) is
//!   ignored;
//! - hex is lowercase only, with no `0x`; data is hex without separators, `-`
//!   for none;
//! - settings (`accepted`, `switch`) stand before the first call, each at most
//!   once;
//! - `cycle` numbers strictly increase, their times never go back and stay
//!   at most [`MAX_T_MS`] (so that the time in ns fits a u64);
//! - `accepted` holds 1 to 16 versions 0..=255, none twice;
//! - a cycle's inputs (the input lines after its `cycle` line, up to the
//!   next; those before the first `cycle` line are the first cycle's) hold
//!   at most one `command` or `silence`;
//! - a `control_out`'s bmRequestType has the direction bit (0x80) clear, a
//!   `control_in`'s has it set; a `bulk_out` endpoint has bit 7 clear, a
//!   `bulk_in` endpoint has it set;
//! - an answer is never longer than the wLength / buffer length it answers;
//! - `bringup` is a setting (before the first call, once): a joint by its
//!   LoLA name, then `<limit-name>=<value>` for each limit that differs from
//!   its default, each limit once, each value its default's bound or tighter;
//! - `jog +` / `jog -` only after the `bringup` line, at most one a cycle.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{Item, Line, Recorded, MAX_T_MS, UNKNOWN_REASON};
use crate::command::{Command, Joint, JOINTS};
use crate::link::{LinkError, Setup};
use crate::protocol::bringup::{BringUpLimits, Jog, Limit};
use crate::protocol::handshake::parse_accepted;
use deathswitch::Reason;

/// The first line of every recording.
pub(crate) const HEADER: &str = "nao-rs recording 1";

/// Why a recording could not be read: where (path, 1-based line; line 0 means
/// the file itself) and why.
///
/// Display: `recordings/x.rec:12: bulk_out: data is not hex (odd length 5)`,
/// or `line 12: ...` when parsed from a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file, when read with [`read_file`].
    pub(crate) path: Option<PathBuf>,
    /// 1-based line number; 0 when the file as a whole could not be read.
    pub line: usize,
    /// What is wrong and, where it helps, what was expected.
    pub reason: String,
}

impl ParseError {
    fn new(line: usize, reason: impl Into<String>) -> Self {
        ParseError {
            path: None,
            line,
            reason: reason.into(),
        }
    }

    fn with_path(mut self, path: &Path) -> Self {
        self.path = Some(path.to_path_buf());
        self
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (Some(p), 0) => write!(f, "{}: {}", p.display(), self.reason),
            (Some(p), n) => write!(f, "{}:{}: {}", p.display(), n, self.reason),
            (None, 0) => write!(f, "{}", self.reason),
            (None, n) => write!(f, "line {}: {}", n, self.reason),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads and parses the recording at `path`.
///
/// # Errors
///
/// A [`ParseError`] carrying the path: line 0 when the file cannot be
/// read, else what [`parse_bytes`] returns.
pub fn read_file(path: &Path) -> Result<Vec<Line>, ParseError> {
    let bytes = std::fs::read(path).map_err(|e| {
        ParseError::new(
            0,
            format!("cannot read the recording: {e} (check the path and its permissions)"),
        )
        .with_path(path)
    })?;
    parse_bytes(&bytes).map_err(|e| e.with_path(path))
}

/// Parses a recording given as bytes: rejects bytes that are not UTF-8 with
/// the line they stand on, then as [`parse`].
///
/// # Errors
///
/// A [`ParseError`] on the line of the first byte that is not UTF-8, or
/// what [`parse`] returns.
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<Line>, ParseError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => {
            let at = e.valid_up_to();
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
            Err(ParseError::new(
                line,
                format!("not UTF-8 text (invalid byte 0x{:02x} at byte offset {at}); a recording is UTF-8 text", bytes[at]),
            ))
        }
    }
}

/// Parses the text of a recording into its meaningful lines, in order.
///
/// # Errors
///
/// A [`ParseError`] with the number of the first malformed line and why
/// (`docs/recording.md`: a missing or unknown header, an unknown line
/// kind, a field out of range, lines out of order).
pub fn parse(text: &str) -> Result<Vec<Line>, ParseError> {
    let mut parser = Parser::default();
    let mut out = Vec::with_capacity(text.len() / 64 + 4);
    let mut saw_header = false;
    for (i, raw) in text.split('\n').enumerate() {
        let number = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if !saw_header {
            check_header(line).map_err(|r| ParseError::new(number, r))?;
            saw_header = true;
            continue;
        }
        if line.starts_with('#') || line.trim_matches(is_sep).is_empty() {
            continue;
        }
        let item = parser
            .line(line, number)
            .map_err(|r| ParseError::new(number, r))?;
        out.push(Line { number, item });
    }
    if !saw_header {
        return Err(ParseError::new(
            1,
            format!("empty file: the first line must be `{HEADER}`"),
        ));
    }
    Ok(out)
}

fn is_sep(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn check_header(line: &str) -> Result<(), String> {
    if line == HEADER {
        return Ok(());
    }
    if let Some(v) = line.strip_prefix("nao-rs recording ") {
        return Err(format!(
            "recording format version {:?} is not supported (this reader reads version 1: `{HEADER}`)",
            v
        ));
    }
    Err(format!(
        "not a recording: the first line must be `{HEADER}`, found {:?}",
        shorten(line)
    ))
}

/// Shortens a field for an error message.
fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push_str("...");
        t
    }
}

/// The state the reader keeps between lines: the rules that span lines.
#[derive(Default)]
struct Parser {
    /// Line-independent: whether a call line has been seen yet.
    first_call_seen: bool,
    accepted_seen: bool,
    switch_seen: bool,
    last_cycle: Option<(u64, u64)>,
    /// The `command` or `silence` line of the current cycle: its keyword
    /// and line number.
    cycle_command: Option<(&'static str, usize)>,
    bringup_seen: bool,
    /// The line number of the current cycle's `jog` line.
    cycle_jog: Option<usize>,
}

type R<T> = Result<T, String>;

impl Parser {
    /// A cycle's second `command` or `silence` is malformed.
    fn once_a_cycle(&mut self, key: &'static str, number: usize) -> R<()> {
        if let Some((first, at)) = self.cycle_command {
            return Err(format!(
                "{key}: a second command or silence in one cycle (`{first}` on line {at}); \
                 a cycle has at most one"
            ));
        }
        self.cycle_command = Some((key, number));
        Ok(())
    }

    fn line(&mut self, line: &str, number: usize) -> R<Item> {
        let mut fields = line.split(is_sep).filter(|f| !f.is_empty());
        // The line is not blank, so there is a first field.
        let key = fields.next().unwrap_or("");
        let mut f = Fields { key, it: fields };
        let item = match key {
            "accepted" => {
                setting(key, self.first_call_seen, &mut self.accepted_seen)?;
                let list = f.next("the versions (decimal, comma separated)")?;
                Item::Accepted(parse_accepted(list).map_err(|e| format!("accepted: {e}"))?)
            }
            "switch" => {
                setting(key, self.first_call_seen, &mut self.switch_seen)?;
                match f.next("`armed` or `tripped`")? {
                    "armed" => Item::SwitchArmed(true),
                    "tripped" => Item::SwitchArmed(false),
                    other => return Err(format!("switch: {:?} is neither `armed` nor `tripped`", shorten(other))),
                }
            }
            "cycle" => {
                let k = dec_u64(f.next("the cycle number k")?).map_err(|e| format!("cycle: k {e}"))?;
                let t_ms = dec_u64(f.next("the time t_ms")?).map_err(|e| format!("cycle: t_ms {e}"))?;
                if t_ms > MAX_T_MS {
                    return Err(format!(
                        "cycle: t_ms {t_ms} is above {MAX_T_MS}, the most whose time in ns fits 64 bits"
                    ));
                }
                if let Some((pk, pt)) = self.last_cycle {
                    if k <= pk {
                        return Err(format!("cycle: k {k} does not follow the previous cycle {pk} (cycle numbers strictly increase)"));
                    }
                    if t_ms < pt {
                        return Err(format!("cycle: t_ms {t_ms} is before the previous cycle's {pt} (time never goes back)"));
                    }
                }
                if self.last_cycle.is_some() {
                    // Inputs before the first cycle line are the first
                    // cycle's: only a later cycle line starts a new count.
                    self.cycle_command = None;
                    self.cycle_jog = None;
                }
                self.last_cycle = Some((k, t_ms));
                Item::Cycle { k, t_ms }
            }
            "command" => {
                let c = command(&mut f)?;
                self.once_a_cycle("command", number)?;
                Item::Command(Box::new(c))
            }
            "silence" => {
                self.once_a_cycle("silence", number)?;
                Item::Silence
            }
            "rearm" => Item::Rearm,
            "wake" => Item::Wake,
            "bringup" => {
                setting(key, self.first_call_seen, &mut self.bringup_seen)?;
                bringup(&mut f)?
            }
            "jog" => {
                let jog = match f.next("the step, `+` or `-`")? {
                    "+" => Jog::Plus,
                    "-" => Jog::Minus,
                    other => {
                        return Err(format!(
                            "jog: {:?} is neither `+` nor `-`",
                            shorten(other)
                        ))
                    }
                };
                if !self.bringup_seen {
                    return Err("jog: no `bringup` line before it (a jog is a bring-up input; \
                                the `bringup` setting names the joint first)"
                        .to_string());
                }
                if let Some(at) = self.cycle_jog {
                    return Err(format!(
                        "jog: a second jog in one cycle (`jog` on line {at}); a cycle has at most one"
                    ));
                }
                self.cycle_jog = Some(number);
                Item::Jog(jog)
            }
            "trip" => {
                let name = f.next("the reason (naoctl, udp, api, ...)")?;
                let reason = Reason::from_name(name);
                if reason.is_none() && name != UNKNOWN_REASON {
                    let known: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
                    return Err(format!(
                        "unknown trip reason {:?} (expected one of {}, or {UNKNOWN_REASON})",
                        shorten(name),
                        known.join(", ")
                    ));
                }
                Item::Trip(reason)
            }
            "open" | "set_configuration" | "claim_interface" | "close" | "control_out" | "control_in" | "bulk_out"
            | "bulk_in" => {
                self.first_call_seen = true;
                Item::Call(call(key, &mut f)?)
            }
            other => {
                return Err(format!(
                    "unknown line {:?} (expected accepted, switch, bringup, cycle, command, silence, trip, rearm, wake, \
                     jog, open, set_configuration, claim_interface, close, control_out, control_in, bulk_out or bulk_in)",
                    shorten(other)
                ))
            }
        };
        f.end()?;
        Ok(item)
    }
}

fn setting(key: &str, first_call_seen: bool, seen: &mut bool) -> R<()> {
    if first_call_seen {
        return Err(format!("{key}: a setting must stand before the first call"));
    }
    if *seen {
        return Err(format!("{key}: given twice (a setting stands once)"));
    }
    *seen = true;
    Ok(())
}

/// The fields of one line after its keyword.
struct Fields<'a, I: Iterator<Item = &'a str>> {
    key: &'a str,
    it: I,
}

impl<'a, I: Iterator<Item = &'a str>> Fields<'a, I> {
    fn next(&mut self, what: &str) -> R<&'a str> {
        self.it
            .next()
            .ok_or_else(|| format!("{}: missing {what}", self.key))
    }

    fn end(&mut self) -> R<()> {
        match self.it.next() {
            None => Ok(()),
            Some(extra) => Err(format!(
                "{}: unexpected field {:?} at the end of the line",
                self.key,
                shorten(extra)
            )),
        }
    }
}

/// A `bringup` line's error for a `given` word that names no `what`, with
/// every name it could be.
fn not_one_of<T: Copy>(what: &str, given: &str, all: &[T], name: fn(T) -> &'static str) -> String {
    let names: Vec<&str> = all.iter().map(|&x| name(x)).collect();
    format!(
        "bringup: {:?} is not a {what} (expected one of {})",
        shorten(given),
        names.join(", ")
    )
}

/// The rest of a `bringup` line: the joint, then `<limit-name>=<value>`
/// fields (each limit once, not at its default, its bound or tighter).
fn bringup<'a, I: Iterator<Item = &'a str>>(f: &mut Fields<'a, I>) -> R<Item> {
    let name = f.next("the joint (its LoLA name, e.g. LShoulderPitch)")?;
    let joint = Joint::from_name(name)
        .ok_or_else(|| not_one_of("joint", name, &Joint::ALL, Joint::name))?;
    let mut limits = BringUpLimits::default();
    let mut seen = [false; crate::protocol::bringup::LIMIT_COUNT];
    for field in f.it.by_ref() {
        let (lname, value) = field.split_once('=').ok_or_else(|| {
            format!(
                "bringup: {:?} is not <limit-name>=<value> (e.g. window=0.2)",
                shorten(field)
            )
        })?;
        let limit = Limit::from_name(lname)
            .ok_or_else(|| not_one_of("limit", lname, &Limit::ALL, Limit::name))?;
        // A fieldless enum: its declaration index, below LIMIT_COUNT.
        let i = limit as usize;
        if seen[i] {
            return Err(format!(
                "bringup: limit {} is given twice (give each limit once)",
                limit.name()
            ));
        }
        seen[i] = true;
        let v = limit_value(value).map_err(|e| format!("bringup: {}: {e}", limit.name()))?;
        if v == limit.default_value() {
            return Err(format!(
                "bringup: {}={} is the default; leave it out (the line names only the limits that differ)",
                limit.name(),
                shorten(value)
            ));
        }
        limits = limits
            .tighten(limit, v)
            .map_err(|e| format!("bringup: {e}"))?;
    }
    Ok(Item::BringUp { joint, limits })
}

/// A limit's value: a finite decimal number.
fn limit_value(s: &str) -> R<f64> {
    let decimal = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        && s.bytes().any(|b| b.is_ascii_digit());
    match (decimal, s.parse::<f64>()) {
        (true, Ok(v)) if v.is_finite() => Ok(v),
        _ => Err(format!("{:?} is not a finite decimal number", shorten(s))),
    }
}

fn command<'a, I: Iterator<Item = &'a str>>(f: &mut Fields<'a, I>) -> R<Command> {
    let mut c = Command::default();
    for j in 0..JOINTS {
        let v = f.next(&format!(
            "stiffness {j} (50 values, then 3 LEDs and the sonar mode)"
        ))?;
        c.stiffness[j] = value(v).map_err(|e| format!("command: stiffness {j}: {e}"))?;
    }
    for j in 0..JOINTS {
        let v = f.next(&format!(
            "position {j} (50 values, then 3 LEDs and the sonar mode)"
        ))?;
        c.position[j] = value(v).map_err(|e| format!("command: position {j}: {e}"))?;
    }
    c.chest_led =
        rgb(f.next("the chest LED rrggbb")?).map_err(|e| format!("command: chest LED {e}"))?;
    c.left_foot_led = rgb(f.next("the left foot LED rrggbb")?)
        .map_err(|e| format!("command: left foot LED {e}"))?;
    c.right_foot_led = rgb(f.next("the right foot LED rrggbb")?)
        .map_err(|e| format!("command: right foot LED {e}"))?;
    c.sonar_mode = hex_u8(f.next("the sonar mode (2 hex digits)")?)
        .map_err(|e| format!("command: sonar mode {e}"))?;
    Ok(c)
}

/// A command value: a decimal f32, or `nan`, `inf`, `-inf`.
fn value(s: &str) -> R<f32> {
    match s {
        "nan" => return Ok(f32::NAN),
        "inf" => return Ok(f32::INFINITY),
        "-inf" => return Ok(f32::NEG_INFINITY),
        _ => {}
    }
    let decimal = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        && s.bytes().any(|b| b.is_ascii_digit());
    let v: f32 = match (decimal, s.parse::<f32>()) {
        (true, Ok(v)) => v,
        _ => {
            return Err(format!(
                "{:?} is not a decimal number (or nan, inf, -inf)",
                shorten(s)
            ))
        }
    };
    if v.is_infinite() {
        return Err(format!(
            "{:?} is out of the f32 range (write inf or -inf)",
            shorten(s)
        ));
    }
    Ok(v)
}

fn rgb(s: &str) -> R<[u8; 3]> {
    let b = hex_fixed(s, 6)?;
    Ok([(b >> 16) as u8, (b >> 8) as u8, b as u8])
}

fn hex_u8(s: &str) -> R<u8> {
    Ok(hex_fixed(s, 2)? as u8)
}

fn hex_u16(s: &str) -> R<u16> {
    Ok(hex_fixed(s, 4)? as u16)
}

/// Exactly `digits` lowercase hex digits.
fn hex_fixed(s: &str, digits: usize) -> R<u32> {
    let mut v = 0u32;
    for (i, b) in s.bytes().enumerate() {
        v = (v << 4)
            | u32::from(
                hex_digit(b).map_err(|e| format!("{:?}: {e} at position {}", shorten(s), i + 1))?,
            );
    }
    if s.len() != digits {
        return Err(format!(
            "{:?} must be exactly {digits} hex digits (found {})",
            shorten(s),
            s.len()
        ));
    }
    Ok(v)
}

fn hex_digit(b: u8) -> R<u8> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' => Err(format!(
            "uppercase hex digit '{}' (the format is lowercase)",
            b as char
        )),
        _ => Err(format!(
            "not a hex digit: {:?}",
            (b as char).escape_default().to_string()
        )),
    }
}

/// Data: `-` for none, else an even number of lowercase hex digits.
fn data(s: &str) -> R<Vec<u8>> {
    if s == "-" {
        return Ok(Vec::new());
    }
    if s.len() & 1 != 0 {
        return Err(format!("is not hex (odd length {})", s.len()));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0]).map_err(|e| format!("is not hex ({e} at byte {i})"))?;
        let lo = hex_digit(pair[1]).map_err(|e| format!("is not hex ({e} at byte {i})"))?;
        out.push(hi << 4 | lo);
    }
    Ok(out)
}

fn dec_u64(s: &str) -> R<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{:?} is not a decimal number", shorten(s)));
    }
    s.parse::<u64>()
        .map_err(|_| format!("{:?} is too large (at most {})", shorten(s), u64::MAX))
}

fn dec_max(s: &str, max: u64) -> R<u64> {
    let v = dec_u64(s)?;
    if v > max {
        return Err(format!("{v} is too large (at most {max})"));
    }
    Ok(v)
}

fn dec_u8(s: &str) -> R<u8> {
    Ok(dec_max(s, u8::MAX.into())? as u8)
}

fn call<'a, I: Iterator<Item = &'a str>>(key: &str, f: &mut Fields<'a, I>) -> R<Recorded> {
    let k = key;
    Ok(match key {
        "open" => {
            let id = f.next("the device vendor:product (ffff:0006)")?;
            let (v, p) = id
                .split_once(':')
                .ok_or_else(|| format!("open: {:?} is not vendor:product", shorten(id)))?;
            let vendor = hex_u16(v).map_err(|e| format!("open: vendor {e}"))?;
            let product = hex_u16(p).map_err(|e| format!("open: product {e}"))?;
            Recorded::Open { vendor, product }
        }
        "set_configuration" => Recorded::SetConfiguration(
            dec_u8(f.next("the configuration")?).map_err(|e| format!("{k}: configuration {e}"))?,
        ),
        "claim_interface" => Recorded::ClaimInterface(
            dec_u8(f.next("the interface")?).map_err(|e| format!("{k}: interface {e}"))?,
        ),
        "close" => Recorded::Close,
        "control_out" | "control_in" => {
            let request_type =
                hex_u8(f.next("bmRequestType")?).map_err(|e| format!("{k}: bmRequestType {e}"))?;
            let request = hex_u8(f.next("bRequest")?).map_err(|e| format!("{k}: bRequest {e}"))?;
            let value = hex_u16(f.next("wValue")?).map_err(|e| format!("{k}: wValue {e}"))?;
            let index = hex_u16(f.next("wIndex")?).map_err(|e| format!("{k}: wIndex {e}"))?;
            let setup = Setup {
                request_type,
                request,
                value,
                index,
            };
            let device_to_host = request_type & 0x80 != 0;
            if key == "control_out" {
                if device_to_host {
                    return Err(format!("{k}: bmRequestType {request_type:02x} has the IN direction bit (0x80) set; write it as control_in"));
                }
                let data = data(f.next("the data (hex, - for none)")?)
                    .map_err(|e| format!("{k}: data {e}"))?;
                if data.len() > usize::from(u16::MAX) {
                    return Err(format!(
                        "{k}: data is {} bytes, more than a control transfer holds (65535)",
                        data.len()
                    ));
                }
                Recorded::ControlOut { setup, data }
            } else {
                if !device_to_host {
                    return Err(format!("{k}: bmRequestType {request_type:02x} has the IN direction bit (0x80) clear; write it as control_out"));
                }
                let length = dec_max(f.next("wLength (decimal)")?, u16::MAX.into())
                    .map_err(|e| format!("{k}: wLength {e}"))? as u16;
                let answer = data(f.next("the answer (hex, - for none)")?)
                    .map_err(|e| format!("{k}: answer {e}"))?;
                if answer.len() > usize::from(length) {
                    return Err(format!(
                        "{k}: answer is {} bytes, more than wLength {length}",
                        answer.len()
                    ));
                }
                Recorded::ControlIn {
                    setup,
                    length,
                    answer,
                }
            }
        }
        "bulk_out" => {
            let endpoint =
                hex_u8(f.next("the endpoint")?).map_err(|e| format!("{k}: endpoint {e}"))?;
            if endpoint & 0x80 != 0 {
                return Err(format!(
                    "{k}: endpoint {endpoint:02x} is an IN endpoint (bit 7 set)"
                ));
            }
            let data = data(f.next("the data (hex, - for none)")?)
                .map_err(|e| format!("{k}: data {e}"))?;
            Recorded::BulkOut { endpoint, data }
        }
        _ => {
            // bulk_in
            let endpoint =
                hex_u8(f.next("the endpoint")?).map_err(|e| format!("{k}: endpoint {e}"))?;
            if endpoint & 0x80 == 0 {
                return Err(format!(
                    "{k}: endpoint {endpoint:02x} is an OUT endpoint (bit 7 clear)"
                ));
            }
            let length = dec_max(f.next("the buffer length (decimal)")?, u32::MAX.into())
                .map_err(|e| format!("{k}: buffer length {e}"))? as usize;
            let answer = match f.next("the answer (hex, -, !timeout, !pipe or !nodev)")? {
                "!timeout" => Err(LinkError::Timeout),
                "!pipe" => Err(LinkError::Pipe),
                "!nodev" => Err(LinkError::NoDevice),
                e if e.starts_with('!') => {
                    return Err(format!(
                        "{k}: unknown error {:?} (expected !timeout, !pipe or !nodev)",
                        shorten(e)
                    ))
                }
                s => {
                    let a = data(s).map_err(|e| format!("{k}: answer {e}"))?;
                    if a.len() > length {
                        return Err(format!(
                            "{k}: answer is {} bytes, more than the buffer length {length}",
                            a.len()
                        ));
                    }
                    Ok(a)
                }
            };
            Recorded::BulkIn {
                endpoint,
                length,
                answer,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ParseError {
        parse(text).expect_err("must be rejected")
    }

    /// `body`, after the header line, is rejected for a reason that says `why`.
    fn rejects(body: &str, why: &str) {
        let e = err(&format!("{HEADER}\n{body}"));
        assert!(e.reason.contains(why), "{body:?}: {e}");
    }

    #[test]
    fn first_line_is_the_header() {
        assert_eq!(parse("nao-rs recording 1\n").unwrap(), vec![]);
        assert_eq!(err("").line, 1);
        assert!(err("nao-rs recording 2\n").reason.contains("not supported"));
        assert!(err("hello\nopen ffff:0006\n").reason.contains("first line"));
    }

    #[test]
    fn trip_with_an_unknown_reason_is_rejected_naming_the_line() {
        let e = err("nao-rs recording 1\ntrip udp\ntrip chest_button\n");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("unknown trip reason"), "{}", e.reason);
        assert!(e.reason.contains("chest-button"), "{}", e.reason);
        let l = parse("nao-rs recording 1\ntrip chest-button\ntrip unknown\n").unwrap();
        assert_eq!(l[0].item, Item::Trip(Some(Reason::ChestButton)));
        assert_eq!(l[1].item, Item::Trip(None));
    }

    #[test]
    fn blank_and_comment_lines_are_ignored() {
        let l = parse("nao-rs recording 1\n\n# hi\n   \nclose\n").unwrap();
        assert_eq!(
            l,
            vec![Line {
                number: 5,
                item: Item::Call(Recorded::Close)
            }]
        );
    }

    #[test]
    fn settings_only_before_the_first_call() {
        let e = err("nao-rs recording 1\nclose\naccepted 10\n");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("before the first call"), "{e}");
        let e = err("nao-rs recording 1\nswitch armed\nswitch tripped\n");
        assert_eq!(e.line, 3);
    }

    #[test]
    fn malformed_data_names_line_and_reason() {
        let e = err("nao-rs recording 1\nbulk_out 02 a5000\n");
        assert_eq!(
            e.to_string(),
            "line 2: bulk_out: data is not hex (odd length 5)"
        );
        let e = e.with_path(Path::new("recordings/x.rec"));
        assert_eq!(
            e.to_string(),
            "recordings/x.rec:2: bulk_out: data is not hex (odd length 5)"
        );
    }

    #[test]
    fn hex_is_lowercase_only() {
        let e = err("nao-rs recording 1\nbulk_out 02 A5\n");
        assert!(e.reason.contains("uppercase"), "{e}");
        let e = err("nao-rs recording 1\nopen FFFF:0006\n");
        assert!(e.reason.contains("uppercase"), "{e}");
    }

    #[test]
    fn command_values_allow_nan_and_inf() {
        let mut vals = vec!["0"; 50];
        vals[0] = "nan";
        vals[1] = "inf";
        vals[2] = "-inf";
        vals[3] = "-0.25";
        let text = format!(
            "nao-rs recording 1\ncommand {} 00ff00 000000 0000ff 0c\n",
            vals.join(" ")
        );
        let l = parse(&text).unwrap();
        let Item::Command(c) = &l[0].item else {
            panic!("not a command: {l:?}")
        };
        assert!(c.stiffness[0].is_nan());
        assert_eq!(c.stiffness[1], f32::INFINITY);
        assert_eq!(c.stiffness[2], f32::NEG_INFINITY);
        assert_eq!(c.stiffness[3], -0.25);
        assert_eq!(c.chest_led, [0, 0xff, 0]);
        assert_eq!(c.right_foot_led, [0, 0, 0xff]);
        assert_eq!(c.sonar_mode, 0x0c);
        for bad in ["NaN", "infinity", "1e39", "0x1", "", "1.2.3"] {
            assert!(value(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn command_with_49_values_is_rejected() {
        let vals = vec!["0"; 49];
        let text = format!(
            "nao-rs recording 1\ncommand {} 00ff00 000000 0000ff 0c\n",
            vals.join(" ")
        );
        assert!(err(&text).reason.contains("command"));
    }

    #[test]
    fn two_of_command_or_silence_in_one_cycle_are_rejected_naming_the_line() {
        let c = format!(
            "command {} 000000 000000 000000 00",
            vec!["0"; 50].join(" ")
        );
        for (body, line) in [
            (format!("cycle 0 0\n{c}\nsilence\n"), 4),
            (format!("cycle 0 0\nsilence\ntrip udp\n{c}\n"), 5),
            (format!("silence\ncycle 0 0\n{c}\n"), 4),
            (
                format!("cycle 0 0\n{c}\nbulk_out 02 -\ncycle 1 12\nsilence\nsilence\n"),
                7,
            ),
        ] {
            let e = err(&format!("{HEADER}\n{body}"));
            assert_eq!(e.line, line, "{e}\n{body}");
            assert!(e.reason.contains("at most one"), "{e}");
        }
        assert!(parse(&format!(
            "nao-rs recording 1\n{c}\ncycle 0 0\nbulk_out 02 -\ncycle 1 12\nsilence\n"
        ))
        .is_ok());
    }

    #[test]
    fn accepted_list_longer_than_16_or_repeated_or_above_255_is_rejected_naming_the_line() {
        let sixteen: Vec<String> = (0..16).map(|v| v.to_string()).collect();
        assert!(parse(&format!(
            "nao-rs recording 1\naccepted {}\n",
            sixteen.join(",")
        ))
        .is_ok());
        let e = err(&format!(
            "nao-rs recording 1\naccepted {},16\n",
            sixteen.join(",")
        ));
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("at most 16"), "{e}");
        let e = err("nao-rs recording 1\n# settings\naccepted 10,11,10\n");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("version 10 is given twice"), "{e}");
        let e = err("nao-rs recording 1\naccepted 10,256\n");
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("\"256\" is not a version"), "{e}");
    }

    #[test]
    fn t_ms_above_18446744073709_is_rejected_naming_the_line() {
        assert_eq!(MAX_T_MS, 18_446_744_073_709);
        assert!(parse("nao-rs recording 1\ncycle 0 18446744073709\n").is_ok());
        let e = err("nao-rs recording 1\ncycle 0 0\ncycle 1 18446744073710\n");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("above 18446744073709"), "{e}");
    }

    #[test]
    fn cycles_increase_and_time_never_goes_back() {
        assert!(parse("nao-rs recording 1\ncycle 0 10\ncycle 1 10\n").is_ok());
        assert_eq!(err("nao-rs recording 1\ncycle 1 10\ncycle 1 12\n").line, 3);
        assert_eq!(err("nao-rs recording 1\ncycle 1 10\ncycle 2 9\n").line, 3);
    }

    #[test]
    fn answers_fit_their_buffer() {
        assert!(parse("nao-rs recording 1\nbulk_in 81 2 0102\n").is_ok());
        rejects("bulk_in 81 1 0102\n", "more than");
        rejects("control_in c0 02 0000 0000 1 0102\n", "more than");
    }

    #[test]
    fn directions_match_the_call() {
        rejects("control_out c0 01 0000 0000 -\n", "direction");
        rejects("control_in 40 01 0000 0000 1 -\n", "direction");
        rejects("bulk_out 81 -\n", "IN endpoint");
        rejects("bulk_in 02 512 -\n", "OUT endpoint");
    }

    #[test]
    fn bulk_in_errors() {
        let l = parse("nao-rs recording 1\nbulk_in 81 512 !timeout\nbulk_in 81 512 !pipe\nbulk_in 81 512 !nodev\n").unwrap();
        let answers: Vec<_> = l
            .iter()
            .map(|l| match &l.item {
                Item::Call(Recorded::BulkIn { answer, .. }) => answer.clone(),
                o => panic!("{o:?}"),
            })
            .collect();
        assert_eq!(
            answers,
            vec![
                Err(LinkError::Timeout),
                Err(LinkError::Pipe),
                Err(LinkError::NoDevice)
            ]
        );
        rejects("bulk_in 81 512 !stall\n", "unknown error");
    }

    #[test]
    fn trailing_fields_and_unknown_lines_are_rejected() {
        rejects("close now\n", "unexpected field");
        rejects("frobnicate\n", "unknown line");
    }

    #[test]
    fn crlf_line_endings_are_read() {
        assert_eq!(parse("nao-rs recording 1\r\nclose\r\n").unwrap().len(), 1);
    }

    #[test]
    fn bringup_line_reads_the_joint_and_the_limits_that_differ() {
        let l = parse(&format!(
            "{HEADER}\nbringup LShoulderPitch window=0.2 max-stiffness=0.1 following-error-cycles=5\n"
        ))
        .unwrap();
        let want = BringUpLimits::default()
            .tighten(Limit::MaxStiffness, 0.1)
            .and_then(|x| x.tighten(Limit::Window, 0.2))
            .and_then(|x| x.tighten(Limit::FollowingErrorCycles, 5.0))
            .unwrap();
        assert_eq!(
            l[0].item,
            Item::BringUp {
                joint: Joint::LShoulderPitch,
                limits: want
            }
        );
        // The stiffness cap may be set up to its bound, above the default.
        let l = parse(&format!("{HEADER}\nbringup HeadYaw max-stiffness=0.3\n")).unwrap();
        let Item::BringUp { limits, .. } = l[0].item else {
            panic!("{l:?}")
        };
        assert_eq!(limits.get(Limit::MaxStiffness), 0.3);
        let l = parse(&format!("{HEADER}\nbringup RHand\n")).unwrap();
        assert_eq!(
            l[0].item,
            Item::BringUp {
                joint: Joint::RHand,
                limits: BringUpLimits::default()
            }
        );
    }

    #[test]
    fn malformed_bringup_lines_are_rejected_naming_line_and_reason() {
        for (body, why) in [
            ("bringup\n", "missing the joint"),
            ("bringup LShoulder\n", "is not a joint"),
            ("bringup lshoulderpitch\n", "is not a joint"),
            ("bringup HeadYaw window\n", "is not <limit-name>=<value>"),
            (
                "bringup HeadYaw windows=0.1\n",
                "\"windows\" is not a limit",
            ),
            ("bringup HeadYaw window=0.5\n", "0.5 rad is not allowed"),
            ("bringup HeadYaw max-stiffness=0.4\n", "at most 0.3"),
            ("bringup HeadYaw window=0\n", "above 0"),
            ("bringup HeadYaw ramp=0.5\n", "at least 1"),
            ("bringup HeadYaw over-current-cycles=2.5\n", "whole number"),
            ("bringup HeadYaw window=nan\n", "not a finite decimal"),
            ("bringup HeadYaw window=1e999\n", "not a finite decimal"),
            ("bringup HeadYaw window=0x1\n", "not a finite decimal"),
            ("bringup HeadYaw window=\n", "not a finite decimal"),
            (
                "bringup HeadYaw window=0.3\n",
                "is the default; leave it out",
            ),
            ("bringup HeadYaw window=0.1 window=0.2\n", "given twice"),
            ("bringup HeadYaw\nbringup HeadYaw\n", "given twice"),
            ("close\nbringup HeadYaw\n", "before the first call"),
        ] {
            let e = err(&format!("{HEADER}\n{body}"));
            assert_eq!(e.line, body.lines().count() + 1, "{body:?}: {e}");
            assert!(e.reason.contains(why), "{body:?}: {e}");
        }
    }

    #[test]
    fn jog_lines_stand_after_bringup_at_most_one_a_cycle() {
        for (body, line, why) in [
            ("jog +\n", 2, "no `bringup` line before it"),
            ("bringup HeadYaw\njog\n", 3, "missing the step"),
            ("bringup HeadYaw\njog up\n", 3, "neither `+` nor `-`"),
            ("bringup HeadYaw\njog + +\n", 3, "unexpected field"),
            (
                "bringup HeadYaw\ncycle 0 0\njog +\njog -\n",
                5,
                "a second jog in one cycle (`jog` on line 4)",
            ),
            // A jog before the first cycle line is the first cycle's.
            (
                "bringup HeadYaw\njog +\ncycle 0 0\njog -\n",
                5,
                "a second jog",
            ),
        ] {
            let e = err(&format!("{HEADER}\n{body}"));
            assert_eq!(e.line, line, "{body:?}: {e}");
            assert!(e.reason.contains(why), "{body:?}: {e}");
        }
        let l = parse(&format!(
            "{HEADER}\nbringup HeadYaw\ncycle 0 0\njog +\ncycle 1 12\njog -\nbulk_out 02 -\ncycle 2 24\njog +\n"
        ))
        .unwrap();
        assert_eq!(l[2].item, Item::Jog(Jog::Plus));
        assert_eq!(l[4].item, Item::Jog(Jog::Minus));
        assert_eq!(l[4].item.to_string(), "jog -");
    }

    #[test]
    fn non_utf8_names_its_line() {
        let e = parse_bytes(b"nao-rs recording 1\nclose\n\xff\n").unwrap_err();
        assert_eq!(e.line, 3);
    }
}
