//! The control commands (`nao-rs-sim ctl --socket PATH <command>`, or the
//! same words as start flags) and the control socket's client.
//!
//! The control socket is a Unix stream socket (`PATH.ctl` by default): a
//! client writes one line, the simulator answers one line (`ok ...`,
//! `error: ...`, or the JSON of `status`) and closes.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nao_wire::protocol::tables::JOINT_NAMES;
use nao_wire::JOINTS;

use crate::body::{
    counts_of_rad, JointFaultKind, Posture, BUMPER_LEFT_CONTACT, BUMPER_RIGHT_CONTACT,
    DEFAULT_HEAT_DEG_C, DEFAULT_OVERCURRENT_MA,
};

/// One control command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtlCommand {
    /// `drop N`: the answers to the next N frames are lost (bulk_in times out).
    Drop(u32),
    /// `corrupt N`: the answers to the next N frames carry a bad CRC.
    Corrupt(u32),
    /// `stall MS`: no answers to frames received in the next MS ms.
    Stall(u64),
    /// `unplug`: the board is gone; every call fails with no device.
    Unplug,
    /// `replug`: the board is back (a power-on: a new session); open again.
    Replug,
    /// `button` (one chest answer with button 1) or `button MS` (held MS ms).
    Button(Option<u64>),
    /// `heat J [DEG]`: joint J reports DEG degC (default 95) until `clear`.
    Heat(usize, i8),
    /// `fault J`: joint J reports status bit 0 until `clear`.
    Fault(usize),
    /// `overcurrent [MA] [MS]`: the battery reports MA mA (default 5200),
    /// for MS ms or until `clear`.
    Overcurrent(i16, Option<u64>),
    /// `clear`: ends every fault (drop, corrupt, stall, button, heat, fault,
    /// over-current, joint faults); does not replug, keeps the posture, the
    /// bumpers and the shaking.
    Clear,
    /// `posture standing|sitting|lying-back|lying-front`: the IMU and the
    /// foot load change at once.
    Posture(Posture),
    /// `bumper left|right|both|none` (or single contacts `lfoot-left`,
    /// `lfoot-right`, `rfoot-left`, `rfoot-right`, several at once): the toe
    /// bumpers held from now on, `[left foot, right foot]` bits.
    Bumper([u8; 2]),
    /// `imu-shake MRAD_S [MS]`: the gyroscope reports +-MRAD_S (0: at rest),
    /// for MS ms or until changed.
    ImuShake(u16, Option<u64>),
    /// `joint-fault JOINT reversed|offset:RAD|stuck|high-current:MA|clear`.
    JointFault(usize, JointFaultKind),
    /// `status`: the simulator's state as one JSON line.
    Status,
}

/// The usage line of the commands.
pub const USAGE: &str = "drop N | corrupt N | stall MS | unplug | replug | button [MS] | \
heat JOINT [DEG] | fault JOINT | overcurrent [MA] [MS] | clear | status | \
posture standing|sitting|lying-back|lying-front | bumper left|right|both|none | \
imu-shake MRAD_S [MS] | joint-fault JOINT reversed|offset:RAD|stuck|high-current:MA|clear";

/// The bumper words of `bumper` and the bits they hold, `[left foot, right
/// foot]`.
pub const BUMPER_WORDS: [(&str, [u8; 2]); 8] = [
    ("none", [0, 0]),
    ("left", [BUMPER_LEFT_CONTACT | BUMPER_RIGHT_CONTACT, 0]),
    ("right", [0, BUMPER_LEFT_CONTACT | BUMPER_RIGHT_CONTACT]),
    (
        "both",
        [
            BUMPER_LEFT_CONTACT | BUMPER_RIGHT_CONTACT,
            BUMPER_LEFT_CONTACT | BUMPER_RIGHT_CONTACT,
        ],
    ),
    ("lfoot-left", [BUMPER_LEFT_CONTACT, 0]),
    ("lfoot-right", [BUMPER_RIGHT_CONTACT, 0]),
    ("rfoot-left", [0, BUMPER_LEFT_CONTACT]),
    ("rfoot-right", [0, BUMPER_RIGHT_CONTACT]),
];

/// The bumpers held by the words of `bumper` (their union).
pub fn parse_bumpers(words: &[&str]) -> Result<[u8; 2], String> {
    let mut held = [0u8; 2];
    for w in words {
        let (_, bits) = BUMPER_WORDS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(w))
            .ok_or_else(|| {
                format!(
                    "unknown bumper {w:?}: use left, right, both, none, or the contacts \
                     lfoot-left, lfoot-right, rfoot-left, rfoot-right"
                )
            })?;
        held[0] |= bits[0];
        held[1] |= bits[1];
    }
    Ok(held)
}

/// A joint fault: `reversed`, `offset:RAD` (radians, |RAD| <= pi), `stuck`,
/// `high-current:MA` (mA, 0..=65535) or `clear`.
pub fn parse_joint_fault(s: &str) -> Result<JointFaultKind, String> {
    let fix = "use reversed, offset:RAD (e.g. offset:0.1), stuck, high-current:MA \
               (e.g. high-current:2000) or clear";
    let (kind, value) = match s.split_once(':') {
        Some((k, v)) => (k, Some(v)),
        None => (s, None),
    };
    match (kind.to_ascii_lowercase().as_str(), value) {
        ("reversed", None) => Ok(JointFaultKind::Reversed),
        ("stuck", None) => Ok(JointFaultKind::Stuck),
        ("clear", None) => Ok(JointFaultKind::Clear),
        ("offset", Some(v)) => {
            let rad: f64 = v
                .parse()
                .map_err(|_| format!("joint fault {s:?}: {v:?} is not a number of radians"))?;
            counts_of_rad(rad).map(JointFaultKind::Offset).ok_or_else(|| {
                format!("joint fault {s:?}: the offset must be a finite angle within -3.1416..=3.1416 rad")
            })
        }
        ("high-current", Some(v)) => v
            .parse::<u16>()
            .map(JointFaultKind::HighCurrent)
            .map_err(|_| format!("joint fault {s:?}: {v:?} is not a current in mA, 0..=65535")),
        _ => Err(format!("unknown joint fault {s:?}: {fix}")),
    }
}

/// A joint by index (0..=24) or LoLA name (`LKneePitch`, case-insensitive).
pub fn parse_joint(s: &str) -> Result<usize, String> {
    if let Ok(j) = s.parse::<usize>() {
        if j < JOINTS {
            return Ok(j);
        }
        return Err(format!(
            "joint {j} out of range: use 0..=24 or a name like LKneePitch"
        ));
    }
    JOINT_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown joint {s:?}: use 0..=24 or a name like LKneePitch"))
}

fn num<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, String> {
    s.parse::<T>()
        .map_err(|_| format!("{what}: {s:?} is not a valid number"))
}

impl CtlCommand {
    /// Parses the words of one command. Errors name the word and the usage.
    pub fn parse(words: &[&str]) -> Result<CtlCommand, String> {
        let usage = || format!("expected one of: {USAGE}");
        let (first, rest) = words.split_first().ok_or_else(usage)?;
        let arg = |i: usize| rest.get(i).copied();
        let cmd = match (*first, rest.len()) {
            ("drop", 1) => CtlCommand::Drop(num("drop N", rest[0])?),
            ("corrupt", 1) => CtlCommand::Corrupt(num("corrupt N", rest[0])?),
            ("stall", 1) => CtlCommand::Stall(num("stall MS", rest[0])?),
            ("unplug", 0) => CtlCommand::Unplug,
            ("replug", 0) => CtlCommand::Replug,
            ("button", 0) => CtlCommand::Button(None),
            ("button", 1) => CtlCommand::Button(Some(num("button MS", rest[0])?)),
            ("heat", 1 | 2) => CtlCommand::Heat(
                parse_joint(rest[0])?,
                match arg(1) {
                    Some(d) => num("heat JOINT DEG", d)?,
                    None => DEFAULT_HEAT_DEG_C,
                },
            ),
            ("fault", 1) => CtlCommand::Fault(parse_joint(rest[0])?),
            ("overcurrent", 0..=2) => CtlCommand::Overcurrent(
                match arg(0) {
                    Some(m) => num("overcurrent MA", m)?,
                    None => DEFAULT_OVERCURRENT_MA,
                },
                match arg(1) {
                    Some(ms) => Some(num("overcurrent MA MS", ms)?),
                    None => None,
                },
            ),
            ("clear", 0) => CtlCommand::Clear,
            ("status", 0) => CtlCommand::Status,
            ("posture", 1) => CtlCommand::Posture(Posture::parse(rest[0])?),
            ("bumper", 1..=4) => CtlCommand::Bumper(parse_bumpers(rest)?),
            ("imu-shake", 1 | 2) => CtlCommand::ImuShake(
                num("imu-shake MRAD_S (0..=32767)", rest[0]).and_then(|v: u16| {
                    if v > i16::MAX as u16 {
                        Err(format!("imu-shake MRAD_S: {v} is above 32767"))
                    } else {
                        Ok(v)
                    }
                })?,
                match arg(1) {
                    Some(ms) => Some(num("imu-shake MRAD_S MS", ms)?),
                    None => None,
                },
            ),
            ("joint-fault", 2) => {
                CtlCommand::JointFault(parse_joint(rest[0])?, parse_joint_fault(rest[1])?)
            }
            ("joint-fault", 3) => CtlCommand::JointFault(
                parse_joint(rest[0])?,
                parse_joint_fault(&format!("{}:{}", rest[1], rest[2]))?,
            ),
            _ => return Err(format!("bad command {:?}: {}", words.join(" "), usage())),
        };
        Ok(cmd)
    }

    /// Parses one line (words separated by spaces).
    pub fn parse_line(line: &str) -> Result<CtlCommand, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        Self::parse(&words)
    }
}

/// The control socket path of simulator socket `socket`: `socket` + `.ctl`.
pub fn default_ctl_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".ctl");
    PathBuf::from(s)
}

/// Sends one command line to the control socket at `ctl` and returns the
/// simulator's answer line (without the newline). An answer starting with
/// `error:` means the simulator refused the command.
pub fn send(ctl: &Path, line: &str) -> io::Result<String> {
    let mut s = UnixStream::connect(ctl).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot connect to the simulator's control socket {}: {e}; is nao-rs-sim running \
                 (its --ctl, or --socket PATH plus .ctl)?",
                ctl.display()
            ),
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(line.trim_end().as_bytes())?;
    s.write_all(b"\n")?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line parses to its command.
    fn parse_rows(rows: &[(&str, CtlCommand)]) {
        for (line, want) in rows {
            assert_eq!(CtlCommand::parse_line(line), Ok(*want), "{line}");
        }
    }

    /// Each line is refused, with an error naming every one of its words.
    fn refuse_rows(rows: &[(&str, &[&str])]) {
        for (line, words) in rows {
            let e = CtlCommand::parse_line(line).unwrap_err();
            assert!(words.iter().all(|w| e.contains(w)), "{line:?}: {e}");
        }
    }

    #[test]
    fn ctl_commands_parse_with_defaults() {
        parse_rows(&[
            ("drop 11", CtlCommand::Drop(11)),
            ("stall 300", CtlCommand::Stall(300)),
            ("button", CtlCommand::Button(None)),
            ("button 50", CtlCommand::Button(Some(50))),
            ("heat 10", CtlCommand::Heat(10, 95)),
            ("heat lkneepitch 91", CtlCommand::Heat(10, 91)),
            ("fault RHand", CtlCommand::Fault(24)),
            ("overcurrent", CtlCommand::Overcurrent(5200, None)),
            (
                "overcurrent 6000 100",
                CtlCommand::Overcurrent(6000, Some(100)),
            ),
        ]);
    }

    #[test]
    fn bad_ctl_commands_name_the_word_and_the_usage() {
        refuse_rows(&[
            ("heat 25", &["25", "0..=24"]),
            ("drop x", &["\"x\""]),
            ("fly", &["expected one of"]),
            ("", &[]),
        ]);
    }

    #[test]
    fn posture_bumper_shake_and_joint_fault_commands_parse() {
        parse_rows(&[
            (
                "posture lying-back",
                CtlCommand::Posture(Posture::LyingBack),
            ),
            ("posture Sitting", CtlCommand::Posture(Posture::Sitting)),
            ("bumper left", CtlCommand::Bumper([3, 0])),
            ("bumper both", CtlCommand::Bumper([3, 3])),
            ("bumper none", CtlCommand::Bumper([0, 0])),
            ("bumper lfoot-right rfoot-left", CtlCommand::Bumper([2, 1])),
            ("imu-shake 300", CtlCommand::ImuShake(300, None)),
            ("imu-shake 300 1000", CtlCommand::ImuShake(300, Some(1000))),
            (
                "joint-fault LShoulderPitch reversed",
                CtlCommand::JointFault(2, JointFaultKind::Reversed),
            ),
            // 0.1 rad = 65.2 counts
            (
                "joint-fault 2 offset:0.1",
                CtlCommand::JointFault(2, JointFaultKind::Offset(65)),
            ),
            (
                "joint-fault 2 offset -0.1",
                CtlCommand::JointFault(2, JointFaultKind::Offset(-65)),
            ),
            (
                "joint-fault rhand stuck",
                CtlCommand::JointFault(24, JointFaultKind::Stuck),
            ),
            (
                "joint-fault 10 high-current:2000",
                CtlCommand::JointFault(10, JointFaultKind::HighCurrent(2000)),
            ),
            (
                "joint-fault 10 clear",
                CtlCommand::JointFault(10, JointFaultKind::Clear),
            ),
        ]);
    }

    #[test]
    fn bad_posture_bumper_shake_and_joint_fault_commands_name_the_value_and_the_fix() {
        refuse_rows(&[
            ("posture upside-down", &["upside-down", "lying-back"]),
            ("bumper middle", &["middle", "both"]),
            ("imu-shake 40000", &["40000"]),
            ("imu-shake -3", &["-3"]),
            ("joint-fault 25 stuck", &["0..=24"]),
            ("joint-fault 2 wobbly", &["wobbly", "offset:RAD"]),
            ("joint-fault 2 offset:x", &["offset:x"]),
            ("joint-fault 2 offset:NaN", &["offset:NaN"]),
            ("joint-fault 2 offset:inf", &["offset:inf"]),
            ("joint-fault 2 offset:4", &["offset:4"]),
            ("joint-fault 2 offset", &["offset"]),
            ("joint-fault 2 high-current:-5", &["-5", "mA"]),
            ("joint-fault 2 reversed:1", &["reversed:1"]),
            ("joint-fault 2", &[]),
            ("bumper", &[]),
        ]);
    }

    #[test]
    fn ctl_path_defaults_to_socket_dot_ctl() {
        assert_eq!(
            default_ctl_path(Path::new("/tmp/a.sock")),
            PathBuf::from("/tmp/a.sock.ctl")
        );
    }
}
