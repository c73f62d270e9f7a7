//! The virtual robot's trace (`nao-rs-sim --trace FILE`): one JSON line per
//! frame received. [`Tail`] follows the file live; the functions below are
//! the pure analysis of its lines.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The fields of one trace line the bench uses (others are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Frame {
    /// CLOCK_MONOTONIC ns when the simulator received the frame.
    pub t_ns: u64,
    /// The sending process.
    pub peer_pid: i32,
    /// The frame's seq.
    pub seq: u16,
    /// The largest stiffness over every slot, per mille.
    pub max_stiffness: u16,
    /// Every stiffness slot is 0.
    pub all_off: bool,
    /// Stiffness slots in the frame (25 in a cycle frame, 0 at start-up).
    pub stiffness_slots: u16,
}

impl Frame {
    /// A cycle frame (with both STIFFNESS broadcasts).
    pub fn is_cycle(&self) -> bool {
        self.stiffness_slots > 0
    }
}

/// Parses complete trace lines; a bad line is an error naming the file,
/// the line number and the text.
pub fn parse(text: &str, first_line: usize, path: &Path) -> io::Result<Vec<Frame>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Frame = serde_json::from_str(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "trace {} line {}: {e}: {line:?}; is nao-rs-sim the one of this workspace?",
                    path.display(),
                    first_line + i + 1
                ),
            )
        })?;
        out.push(f);
    }
    Ok(out)
}

/// Follows a trace file as it grows.
pub struct Tail {
    path: PathBuf,
    file: Option<File>,
    partial: Vec<u8>,
    lines: usize,
}

impl Tail {
    /// Follows `path` from its start (it may not exist yet).
    pub fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            file: None,
            partial: Vec::new(),
            lines: 0,
        }
    }

    /// The frames completed since the last call.
    pub fn poll(&mut self) -> io::Result<Vec<Frame>> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot read the trace {}: {e}", self.path.display()),
                    ))
                }
            }
        }
        let Some(f) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        f.read_to_end(&mut self.partial)?;
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        let text = String::from_utf8_lossy(&complete);
        let frames = parse(&text, self.lines, &self.path)?;
        self.lines += text.lines().count();
        Ok(frames)
    }
}

/// Cycle timing of process `pid` from its cycle frames, in trace order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleTiming {
    /// Time between two frames with consecutive seq, ns.
    pub periods_ns: Vec<u64>,
    /// Each frame's delay against the ideal grid `t_first + k * period`
    /// (k: frames since the first, from the seq), shifted so that the least
    /// delayed frame has lateness 0, ns.
    pub lateness_ns: Vec<u64>,
    /// Frames whose seq skipped (a lost or reordered frame).
    pub seq_gaps: u64,
}

/// The cycle timing of `pid`'s cycle frames in `frames` for a cycle of
/// `period_ns`.
pub fn cycle_timing(frames: &[Frame], pid: i32, period_ns: u64) -> CycleTiming {
    let mut out = CycleTiming::default();
    let mut prev: Option<Frame> = None;
    let mut k: i128 = 0;
    let mut residuals: Vec<i128> = Vec::new();
    let mut t_first: i128 = 0;
    for f in frames.iter().filter(|f| f.peer_pid == pid && f.is_cycle()) {
        match prev {
            None => t_first = i128::from(f.t_ns),
            Some(p) => {
                let step = f.seq.wrapping_sub(p.seq);
                if step == 1 {
                    out.periods_ns.push(f.t_ns.saturating_sub(p.t_ns));
                } else {
                    out.seq_gaps += 1;
                }
                k += i128::from(step);
            }
        }
        residuals.push(i128::from(f.t_ns) - t_first - k * i128::from(period_ns));
        prev = Some(*f);
    }
    if let Some(min) = residuals.iter().copied().min() {
        out.lateness_ns = residuals
            .iter()
            .map(|r| u64::try_from(r - min).unwrap_or(u64::MAX))
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t_ms: u64, pid: i32, seq: u16, stiff: u16) -> Frame {
        Frame {
            t_ns: t_ms * 1_000_000,
            peer_pid: pid,
            seq,
            max_stiffness: stiff,
            all_off: stiff == 0,
            stiffness_slots: 25,
        }
    }

    #[test]
    fn trace_lines_parse_and_a_bad_line_names_file_and_line() {
        let p = Path::new("/x/trace.jsonl");
        let text = "{\"t_ns\":5,\"peer_pid\":3,\"seq\":2,\"max_stiffness\":9,\"max_stiffness_all\":9,\"max_stiffness_accepted\":9,\"all_off\":false,\"stiffness_slots\":25}\n";
        let v = parse(text, 0, p).unwrap();
        assert_eq!(v[0], frame(0, 3, 2, 9).with_t(5));
        let e = parse("{}\n", 4, p).unwrap_err().to_string();
        assert!(e.contains("/x/trace.jsonl line 5"), "{e}");
    }

    impl Frame {
        fn with_t(mut self, t: u64) -> Frame {
            self.t_ns = t;
            self
        }
    }

    #[test]
    fn tail_returns_only_complete_lines_as_the_file_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tail = Tail::new(&path);
        assert!(tail.poll().unwrap().is_empty());
        let line = "{\"t_ns\":1,\"peer_pid\":1,\"seq\":1,\"max_stiffness\":0,\"all_off\":true,\"stiffness_slots\":0}\n";
        std::fs::write(&path, format!("{line}{}", &line[..10])).unwrap();
        assert_eq!(tail.poll().unwrap().len(), 1);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&line.as_bytes()[10..]).unwrap();
        f.write_all(line.as_bytes()).unwrap();
        assert_eq!(tail.poll().unwrap().len(), 2);
    }

    #[test]
    fn cycle_timing_gives_periods_and_lateness_against_the_grid() {
        // Frames at 0, 12, 25 (1 ms late), 36, a lost seq, then 60 (on grid).
        let v = [
            frame(0, 7, 10, 0),
            frame(12, 7, 11, 0),
            frame(99, 8, 0, 0),
            frame(25, 7, 12, 0),
            frame(36, 7, 13, 0),
            frame(60, 7, 15, 0),
        ];
        let t = cycle_timing(&v, 7, 12_000_000);
        assert_eq!(t.periods_ns, vec![12_000_000, 13_000_000, 11_000_000]);
        assert_eq!(t.lateness_ns, vec![0, 0, 1_000_000, 0, 0]);
        assert_eq!(t.seq_gaps, 1);
    }
}
