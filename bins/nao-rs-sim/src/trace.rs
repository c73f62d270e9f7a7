//! The trace (`--trace FILE`): one JSON line per valid frame received,
//! written and flushed as the frame arrives, so tests can read it live.
//!
//! ```text
//! {"t_ns":123,"peer_pid":4242,"seq":57,"max_stiffness":500,"max_stiffness_all":500,"max_stiffness_accepted":500,"all_off":false,"stiffness_slots":25}
//! ```
//!
//! - `t_ns`: CLOCK_MONOTONIC when the simulator received the frame;
//! - `peer_pid`: the sending process (SO_PEERCRED of its connection);
//! - `seq`: the frame's seq;
//! - `max_stiffness`: the largest stiffness, per mille, over every slot of
//!   the frame's STIFFNESS broadcasts (the conservative reading: the
//!   simulator cannot know which boards the runtime accepted);
//! - `max_stiffness_all`: the same value (kept as an explicit name);
//! - `max_stiffness_accepted`: over the joints of boards whose handshake
//!   answer in this session carried a version in the simulator's
//!   `--accepted` list (default 10, the runtime's default);
//! - `all_off`: every stiffness slot is 0 (also true for a frame without
//!   STIFFNESS, such as the two start-up frames);
//! - `stiffness_slots`: how many stiffness slots the frame has (25 in a
//!   cycle frame, 0 in the start-up frames);
//! - `posture`, `bumpers`, `imu_shake_mrad_s`, `joint_faults`: what the
//!   body's answer to this frame reports (set by `--posture`, `ctl posture`,
//!   `ctl bumper`, `ctl imu-shake`, `ctl joint-fault`), so a test judges each
//!   frame by the state the runtime saw: `bumpers` `[left foot, right foot]`
//!   (bit 0 left contact, bit 1 right contact); `joint_faults` one object per
//!   faulted joint (`joint`, `reversed`, `offset_counts`, `stuck`,
//!   `high_current_ma`);
//! - `stiffness`, `target`, `position`, `current_ma`: every joint (25, in
//!   `nao_wire::Joint` order) as the frame left it: the stiffness in effect
//!   (per mille), the commanded position and the position the answer
//!   reports (rad from the joint's zero, as the runtime decodes it; an
//!   injected offset included), the current the answer reports (mA).
//!
//! Readers: [`read`] (the whole file) and [`Tail`] (follow it live) give
//! [`TraceLine`]s (the stiffness facts); [`read_records`] and
//! [`Tail::wait_for_record`] the whole [`TraceRecord`].

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::body::Posture;
use crate::device::FrameSeen;
use nao_wire::protocol::tables::{decode_position, JOINT_NAMES};

/// One line of the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceLine {
    /// CLOCK_MONOTONIC ns when the frame was received.
    pub t_ns: u64,
    /// The sender's pid (SO_PEERCRED).
    pub peer_pid: i32,
    /// The frame's seq.
    pub seq: u16,
    /// Largest stiffness over every slot, per mille.
    pub max_stiffness: u16,
    /// Same as `max_stiffness`.
    pub max_stiffness_all: u16,
    /// Largest stiffness over the joints of boards the simulator saw accepted.
    pub max_stiffness_accepted: u16,
    /// Every stiffness slot is 0.
    pub all_off: bool,
    /// Number of stiffness slots in the frame (25 for a cycle frame).
    pub stiffness_slots: u16,
}

impl TraceLine {
    /// A cycle frame (it carries both STIFFNESS broadcasts), not a start-up
    /// frame.
    pub fn is_cycle_frame(&self) -> bool {
        self.stiffness_slots > 0
    }
}

/// A faulted joint in a trace line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceJointFault {
    /// The joint's LoLA name.
    pub joint: String,
    /// The motor moves opposite to the command.
    pub reversed: bool,
    /// Reported position = true position + this, counts.
    pub offset_counts: i16,
    /// The joint does not move.
    pub stuck: bool,
    /// The current it draws while stiff, mA.
    pub high_current_ma: Option<u16>,
}

/// One whole line of the trace: the frame's [`TraceLine`] and the body's
/// state its answer reported. Lines of an older simulator (no state) read
/// as standing, nothing held, no fault, no joints (every field but the
/// frame's has its default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceRecord {
    /// The frame's facts.
    #[serde(flatten)]
    pub frame: TraceLine,
    /// The posture.
    pub posture: Posture,
    /// The toe bumpers held, `[left foot, right foot]`.
    pub bumpers: [u8; 2],
    /// The gyroscope's shake amplitude, mrad/s.
    pub imu_shake_mrad_s: u16,
    /// The faulted joints.
    pub joint_faults: Vec<TraceJointFault>,
    /// Per joint (`nao_wire::Joint` order): the stiffness in effect after
    /// the frame, per mille.
    pub stiffness: Vec<u16>,
    /// Per joint: the commanded position after the frame, rad.
    pub target: Vec<f32>,
    /// Per joint: the position the answer reports, rad.
    pub position: Vec<f32>,
    /// Per joint: the current the answer reports, mA.
    pub current_ma: Vec<u16>,
}

impl TraceRecord {
    /// Any toe bumper is held.
    pub fn bumper_held(&self) -> bool {
        self.bumpers != [0, 0]
    }

    /// The fault of joint `name` (LoLA name, case-insensitive), if any.
    pub fn joint_fault(&self, name: &str) -> Option<&TraceJointFault> {
        self.joint_faults
            .iter()
            .find(|f| f.joint.eq_ignore_ascii_case(name))
    }
}

/// Writes the trace: one line per frame, flushed at once.
pub struct TraceWriter {
    file: File,
    line: String,
}

impl TraceWriter {
    /// Creates (truncates) the trace file at `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create the trace file {}: {e}", path.display()),
            )
        })?;
        Ok(TraceWriter {
            file,
            line: String::with_capacity(1024),
        })
    }

    /// Writes one line for `f` (a single write, so a reader never sees half
    /// a line unless it reads during that write).
    pub fn write(&mut self, f: &FrameSeen) -> io::Result<()> {
        self.line.clear();
        let s = &f.stiffness;
        let b = &f.state;
        let _ = write!(
            self.line,
            "{{\"t_ns\":{},\"peer_pid\":{},\"seq\":{},\"max_stiffness\":{},\"max_stiffness_all\":{},\"max_stiffness_accepted\":{},\"all_off\":{},\"stiffness_slots\":{},\"posture\":\"{}\",\"bumpers\":[{},{}],\"imu_shake_mrad_s\":{},\"joint_faults\":[",
            f.t_ns, f.peer_pid, f.seq, s.max_all, s.max_all, s.max_accepted, s.all_off(), s.slots,
            b.posture.name(), b.bumpers[0], b.bumpers[1], b.imu_shake_mrad_s
        );
        let mut first = true;
        for (j, jf) in b.joint_faults.iter().enumerate() {
            if jf.is_none() {
                continue;
            }
            let name = JOINT_NAMES.get(j).copied().unwrap_or("?");
            let _ = write!(
                self.line,
                "{}{{\"joint\":\"{}\",\"reversed\":{},\"offset_counts\":{},\"stuck\":{},\"high_current_ma\":{}}}",
                if first { "" } else { "," },
                name,
                jf.reversed,
                jf.offset_counts,
                jf.stuck,
                jf.high_current_ma.map_or("null".to_string(), |m| m.to_string())
            );
            first = false;
        }
        let j = &b.joints;
        let rad = |count: u16, zero: u16| decode_position(count, zero);
        self.line.push_str("],\"stiffness\":");
        self.push_list(j.stiffness.iter().map(|v| *v as f32), 0);
        self.line.push_str(",\"target\":");
        self.push_list(j.target.iter().zip(&j.zero).map(|(c, z)| rad(*c, *z)), 4);
        self.line.push_str(",\"position\":");
        self.push_list(j.position.iter().zip(&j.zero).map(|(c, z)| rad(*c, *z)), 4);
        self.line.push_str(",\"current_ma\":");
        self.push_list(j.current_ma.iter().map(|v| *v as f32), 0);
        self.line.push_str("}\n");
        self.file.write_all(self.line.as_bytes())?;
        self.file.flush()
    }
}

impl TraceWriter {
    /// Appends `[v,v,...]` with `decimals` digits after the point.
    fn push_list(&mut self, values: impl Iterator<Item = f32>, decimals: usize) {
        self.line.push('[');
        for (i, v) in values.enumerate() {
            if i > 0 {
                self.line.push(',');
            }
            let _ = write!(self.line, "{v:.decimals$}");
        }
        self.line.push(']');
    }
}

fn parse_lines<T: DeserializeOwned>(
    text: &str,
    first_line: usize,
    path: &Path,
) -> io::Result<Vec<T>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let t: T = serde_json::from_str(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} line {}: {e}: {line}",
                    path.display(),
                    first_line + i + 1
                ),
            )
        })?;
        out.push(t);
    }
    Ok(out)
}

/// Every complete line of the trace at `path` (a last line still being
/// written is left out).
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<TraceLine>> {
    read_as(path.as_ref())
}

/// Every complete line of the trace at `path` as a whole record (with the
/// body's state).
pub fn read_records(path: impl AsRef<Path>) -> io::Result<Vec<TraceRecord>> {
    read_as(path.as_ref())
}

fn read_as<T: DeserializeOwned>(path: &Path) -> io::Result<Vec<T>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read trace {}: {e}", path.display()),
        )
    })?;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    parse_lines(complete, 0, path)
}

/// Follows a trace file live: each [`Tail::poll`] returns the lines
/// completed since the last.
pub struct Tail {
    path: PathBuf,
    pos: u64,
    partial: String,
    lines_seen: usize,
    queue: VecDeque<TraceRecord>,
}

impl Tail {
    /// Follows `path` from its start (the file may not exist yet).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Tail {
            path: path.as_ref().to_path_buf(),
            pos: 0,
            partial: String::new(),
            lines_seen: 0,
            queue: VecDeque::new(),
        }
    }

    /// Follows `path` from its current end: only lines written from now on.
    pub fn from_end(path: impl AsRef<Path>) -> io::Result<Self> {
        let mut t = Tail::new(path);
        t.poll()?;
        Ok(t)
    }

    /// Reads the lines completed since the last read into the queue.
    fn fill(&mut self) -> io::Result<()> {
        let mut f = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        if len < self.pos {
            // Truncated (a new simulator): start over.
            self.pos = 0;
            self.partial.clear();
        }
        f.seek(io::SeekFrom::Start(self.pos))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        self.pos += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let Some(end) = self.partial.rfind('\n') else {
            return Ok(());
        };
        let complete: String = self.partial.drain(..=end).collect();
        let lines = parse_lines(&complete, self.lines_seen, &self.path)?;
        self.lines_seen += complete.lines().count();
        self.queue.extend(lines);
        Ok(())
    }

    /// The lines completed since the last poll (none if the file does not
    /// exist yet).
    pub fn poll(&mut self) -> io::Result<Vec<TraceLine>> {
        Ok(self.poll_records()?.into_iter().map(|r| r.frame).collect())
    }

    /// The whole records completed since the last poll.
    pub fn poll_records(&mut self) -> io::Result<Vec<TraceRecord>> {
        self.fill()?;
        Ok(self.queue.drain(..).collect())
    }

    /// Polls every 2 ms until a line satisfies `pred` (returned) or
    /// `timeout` passes (`None`). Lines before the match are consumed;
    /// lines after it stay for the next call.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&TraceLine) -> bool,
    ) -> io::Result<Option<TraceLine>> {
        Ok(self
            .wait_for_record(timeout, |r| pred(&r.frame))?
            .map(|r| r.frame))
    }

    /// [`Tail::wait_for`] judging the whole record (posture, bumpers, joint
    /// faults).
    pub fn wait_for_record(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&TraceRecord) -> bool,
    ) -> io::Result<Option<TraceRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.fill()?;
            while let Some(l) = self.queue.pop_front() {
                if pred(&l) {
                    return Ok(Some(l));
                }
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Collects every line written during the next `duration`.
    pub fn collect_for(&mut self, duration: Duration) -> io::Result<Vec<TraceLine>> {
        let deadline = Instant::now() + duration;
        while Instant::now() < deadline {
            self.fill()?;
            std::thread::sleep(Duration::from_millis(2));
        }
        self.poll()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{JointFaultKind, StiffnessSummary};
    use crate::device::BodyState;

    fn seen(seq: u16, max: u16) -> FrameSeen {
        FrameSeen {
            t_ns: 10 + u64::from(seq),
            peer_pid: 77,
            seq,
            stiffness: StiffnessSummary {
                slots: 25,
                max_all: max,
                max_accepted: max,
            },
            state: BodyState::default(),
        }
    }

    #[test]
    fn trace_records_carry_posture_bumpers_shake_and_joint_faults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = TraceWriter::create(&path).unwrap();
        w.write(&seen(2, 0)).unwrap();
        let mut f = seen(3, 200);
        f.state.posture = Posture::LyingBack;
        f.state.bumpers = [3, 0];
        f.state.imu_shake_mrad_s = 300;
        f.state.joint_faults[2].apply(JointFaultKind::Reversed);
        f.state.joint_faults[2].apply(JointFaultKind::Offset(-65));
        f.state.joint_faults[10].apply(JointFaultKind::HighCurrent(2000));
        f.state.joint_faults[24].apply(JointFaultKind::Stuck);
        w.write(&f).unwrap();
        let r = read_records(&path).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].posture, r[0].bumper_held(), r[0].joint_faults.len()),
            (Posture::Standing, false, 0)
        );
        assert_eq!(r[1].frame.max_stiffness, 200);
        assert_eq!(r[1].posture, Posture::LyingBack);
        assert!(r[1].bumper_held());
        assert_eq!(r[1].imu_shake_mrad_s, 300);
        assert_eq!(
            r[1].joint_fault("lshoulderpitch"),
            Some(&TraceJointFault {
                joint: "LShoulderPitch".into(),
                reversed: true,
                offset_counts: -65,
                stuck: false,
                high_current_ma: None
            })
        );
        assert_eq!(
            r[1].joint_fault("LKneePitch").unwrap().high_current_ma,
            Some(2000)
        );
        assert!(r[1].joint_fault("RHand").unwrap().stuck);
        // The frame facts read as before, and the tail follows records.
        assert_eq!(read(&path).unwrap()[1], r[1].frame);
        let mut tail = Tail::new(&path);
        let hit = tail
            .wait_for_record(Duration::from_millis(50), |r| {
                r.posture == Posture::LyingBack
            })
            .unwrap()
            .unwrap();
        assert_eq!(hit.frame.seq, 3);
    }

    #[test]
    fn trace_records_carry_every_joints_stiffness_target_position_and_current() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = TraceWriter::create(&path).unwrap();
        let mut f = seen(3, 200);
        f.state.joints.zero = [2048; nao_wire::JOINTS];
        f.state.joints.target = [2048; nao_wire::JOINTS];
        f.state.joints.position = [2048; nao_wire::JOINTS];
        f.state.joints.stiffness[2] = 200;
        f.state.joints.target[2] = 2048 + 65; // 0.0997 rad
        f.state.joints.position[2] = 2048 - 33;
        f.state.joints.current_ma[2] = 1600;
        w.write(&f).unwrap();
        let r = &read_records(&path).unwrap()[0];
        assert_eq!(r.stiffness.len(), nao_wire::JOINTS);
        assert_eq!((r.stiffness[2], r.stiffness[3]), (200, 0));
        assert!((r.target[2] - 0.0997).abs() < 1e-4, "{:?}", r.target);
        assert!((r.position[2] + 0.0506).abs() < 1e-4, "{:?}", r.position);
        assert_eq!(r.target[0], 0.0);
        assert_eq!((r.current_ma[2], r.current_ma[0]), (1600, 0));
    }

    #[test]
    fn trace_lines_of_an_older_simulator_read_as_standing_without_faults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"t_ns\":1,\"peer_pid\":1,\"seq\":1,\"max_stiffness\":0,\"max_stiffness_all\":0,\"max_stiffness_accepted\":0,\"all_off\":true,\"stiffness_slots\":0}\n").unwrap();
        let r = read_records(&path).unwrap();
        assert_eq!(r[0].posture, Posture::Standing);
        assert_eq!(r[0].bumpers, [0, 0]);
        assert!(r[0].joint_faults.is_empty());
    }

    #[test]
    fn trace_lines_round_trip_and_tail_follows_live() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tail = Tail::new(&path);
        assert!(tail.poll().unwrap().is_empty());
        let mut w = TraceWriter::create(&path).unwrap();
        w.write(&seen(2, 0)).unwrap();
        w.write(&seen(3, 500)).unwrap();
        let got = tail.poll().unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].all_off && !got[1].all_off);
        assert_eq!(got[1].max_stiffness, 500);
        assert_eq!(got[1].peer_pid, 77);
        w.write(&seen(4, 0)).unwrap();
        w.write(&seen(5, 7)).unwrap();
        let hit = tail
            .wait_for(Duration::from_millis(50), |l| l.seq == 4)
            .unwrap()
            .unwrap();
        assert_eq!(hit.seq, 4);
        let next = tail
            .wait_for(Duration::from_millis(50), |_| true)
            .unwrap()
            .unwrap();
        assert_eq!(next.seq, 5, "lines after a match are kept");
        assert_eq!(read(&path).unwrap().len(), 4);
    }

    #[test]
    fn trace_reader_leaves_out_a_partial_last_line_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"t_ns\":1,\"peer_pid\":1,\"seq\":1,\"max_stiffness\":0,\"max_stiffness_all\":0,\"max_stiffness_accepted\":0,\"all_off\":true,\"stiffness_slots\":0}\n{\"t_ns\":").unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        std::fs::write(&path, "garbage\n").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
