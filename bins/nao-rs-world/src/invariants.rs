//! The invariants (issue 30), each a pure function over what the world
//! knows as fact (not what a process believes), checked after every
//! event. `Err` says what broke, in words.
//!
//! - I1: a frame built while the page the step read was tripped is all-off;
//! - I2: after a re-arm, no stiff frame until a wake whose sender read the
//!   page after that re-arm (and, since every start is limp, after the
//!   start of the runtime that sends the frame);
//! - I3: a hang, crash or disobeyed trip gets the guard's all-off within
//!   the documented bounds;
//! - I4: every stop delivered to the port trips the switch within its
//!   bound, also while a process restarts;
//! - I5: the guard never signals or hands the board to a process whose
//!   identity it did not verify;
//! - I6: at most one writer of the chest board at a time;
//! - I7: bring-up: only the chosen joint, never above the cap.

use std::fmt;

use crate::schedule::MS;

/// An invariant's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inv {
    /// A frame built while the page read tripped is all-off.
    I1,
    /// No stiff frame after a re-arm without a wake read after it.
    I2,
    /// The guard's all-off within its bounds.
    I3,
    /// A delivered stop trips within its bound.
    I4,
    /// Only verified processes are signalled or handed the board.
    I5,
    /// One writer of the chest board.
    I6,
    /// Bring-up: the chosen joint only, under the cap.
    I7,
}

impl fmt::Display for Inv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Inv::I1 => "I1 (a frame built while the page read tripped is all-off)",
            Inv::I2 => "I2 (after a re-arm, no stiff frame until a wake read after it)",
            Inv::I3 => "I3 (a hang, crash or disobeyed trip gets the guard's all-off in bound)",
            Inv::I4 => "I4 (every stop delivered to the port trips within its bound)",
            Inv::I5 => "I5 (the guard signals only a process it verified)",
            Inv::I6 => "I6 (at most one writer of the chest board)",
            Inv::I7 => "I7 (bring-up: only the chosen joint, never above the cap)",
        })
    }
}

/// How long past its bound the guard's all-off may come (I3): two polls
/// (2 ms each: one to see the trip or the loss, which starts the guard's
/// count, one to pass the bound) and one ms more.
pub const GUARD_SLACK_NS: u64 = 5 * MS;
/// How long a stop may sit unread in the port's queue while a process
/// that holds the port runs (I4): the listener wakes on the datagram; 5 ms
/// is its bound in the world.
pub const STOP_READ_BOUND_NS: u64 = 5 * MS;

/// I1: the step read the page `read_armed`; its frame was `all_off`.
pub fn i1_tripped_read_frame_all_off(read_armed: bool, all_off: bool) -> Result<(), String> {
    if !read_armed && !all_off {
        return Err("the step read the page tripped and built a stiff frame".into());
    }
    Ok(())
}

/// I2: a frame (`all_off` or not) of the runtime that registered at
/// `registered_ns`, with the last re-arm at `rearm_ns`; `wakes` are the
/// times the senders of the wakes this runtime took read the page.
pub fn i2_stiff_frame_needs_a_wake_read_after_the_rearm(
    all_off: bool,
    rearm_ns: u64,
    registered_ns: u64,
    wakes: &[u64],
) -> Result<(), String> {
    if all_off {
        return Ok(());
    }
    let after = rearm_ns.max(registered_ns);
    if wakes.iter().any(|&read| read > after) {
        return Ok(());
    }
    Err(format!(
        "a stiff frame with no wake read after the re-arm at {:.3} s and the runtime's start at {:.3} s (wakes read at {:?} ms)",
        rearm_ns as f64 / 1e9,
        registered_ns as f64 / 1e9,
        wakes.iter().map(|w| w / MS).collect::<Vec<_>>()
    ))
}

/// What the guard owes (I3): a take-over by `due_ns`, for `why`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owed {
    /// Since when (the fault, or the last beat before it).
    pub since_ns: u64,
    /// The bound: the guard must hold the board by then.
    pub due_ns: u64,
    /// What it is owed for.
    pub why: &'static str,
    /// The runtime (the world's index) whose fault it is.
    pub runtime: usize,
}

/// I3: `owed` still open at `now_ns` (none discharged by a take-over, a
/// beat or a confirmation in time).
pub fn i3_guard_all_off_in_bound(owed: &[Owed], now_ns: u64) -> Result<(), String> {
    match owed.iter().find(|o| now_ns > o.due_ns) {
        None => Ok(()),
        Some(o) => Err(format!(
            "{} at {:.3} s: no guard take-over by {:.3} s",
            o.why,
            o.since_ns as f64 / 1e9,
            o.due_ns as f64 / 1e9
        )),
    }
}

/// I4: a stop has waited unread in the port's queue since `unread_since`
/// (counted only while a process that holds the port ran).
pub fn i4_delivered_stop_trips_in_bound(
    unread_since: Option<u64>,
    now_ns: u64,
) -> Result<(), String> {
    match unread_since {
        Some(t) if now_ns.saturating_sub(t) > STOP_READ_BOUND_NS => Err(format!(
            "a stop delivered to the port at {:.3} s is still unread at {:.3} s while a holder of the port runs",
            t as f64 / 1e9,
            now_ns as f64 / 1e9
        )),
        _ => Ok(()),
    }
}

/// A process as the world knows it: its pid and its start time.
pub type Identity = (u32, u64);

/// I5: the guard signalled (or handed the board to) `target`, the process
/// that really has the pid; `verified` is the identity the guard verified
/// and holds.
pub fn i5_signal_only_verified(
    target: Option<Identity>,
    verified: Option<Identity>,
) -> Result<(), String> {
    match (target, verified) {
        (Some(t), Some(v)) if t == v => Ok(()),
        (None, _) => Ok(()),
        (Some(t), v) => Err(format!(
            "the guard signalled pid {} (started at tick {}), verified: {v:?}",
            t.0, t.1
        )),
    }
}

/// I6: how many processes hold the chest board open now.
pub fn i6_one_writer(writers: usize) -> Result<(), String> {
    if writers > 1 {
        return Err(format!("{writers} processes hold the chest board at once"));
    }
    Ok(())
}

/// I7: a bring-up frame's stiffness per joint (per mille): every joint but
/// `joint` is 0, `joint` at most `cap` (per mille).
pub fn i7_bringup_one_joint_under_cap(
    stiffness: &[u16],
    joint: usize,
    cap: u16,
) -> Result<(), String> {
    for (j, &s) in stiffness.iter().enumerate() {
        if j != joint && s != 0 {
            return Err(format!(
                "bring-up of joint {joint}: joint {j} stiff ({s} per mille)"
            ));
        }
        if j == joint && s > cap {
            return Err(format!(
                "bring-up of joint {joint}: {s} per mille above the cap {cap}"
            ));
        }
    }
    Ok(())
}
