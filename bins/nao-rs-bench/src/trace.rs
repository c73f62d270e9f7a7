//! The analysis of the virtual robot's trace (`nao-rs-sim --trace FILE`,
//! one line per frame received, read with `nao_rs_sim::Tail`): the cycle
//! timing of one process.

use nao_rs_sim::TraceLine;

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
pub fn cycle_timing(frames: &[TraceLine], pid: i32, period_ns: u64) -> CycleTiming {
    let mut out = CycleTiming::default();
    let mut prev: Option<TraceLine> = None;
    let mut k: i128 = 0;
    let mut residuals: Vec<i128> = Vec::new();
    let mut t_first: i128 = 0;
    for f in frames
        .iter()
        .filter(|f| f.peer_pid == pid && f.is_cycle_frame())
    {
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

    fn frame(t_ms: u64, pid: i32, seq: u16, stiff: u16) -> TraceLine {
        TraceLine {
            t_ns: t_ms * 1_000_000,
            peer_pid: pid,
            seq,
            max_stiffness: stiff,
            max_stiffness_all: stiff,
            max_stiffness_accepted: stiff,
            all_off: stiff == 0,
            stiffness_slots: 25,
        }
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
