//! The gate: what a frame may do, decided once a cycle, in one place.
//!
//! Each cycle the switch is read once (one [`Snapshot`]); `Gate::decide`
//! takes that read, what the gate latched before, and the cycle's events (a
//! person's wake, a trip raised by the last answer, the bring-up inputs) and
//! returns a [`Verdict`]. `Verdict::apply` is the one function in nao-rs
//! that sets a stiffness to 0 because of the switch; every other layer only
//! asserts it (`docs/safety-rules.md`, "Tripped means all-off").
//!
//! One state machine holds both latches the safety model needs:
//!
//! - **No trip goes unseen.** A frame is tripped when the read finds the
//!   switch tripped (a page without its magic or a damaged page reads as
//!   tripped `page-lost`), when the trip count differs from the count read
//!   for the last frame (a trip and a re-arm between two reads; any change,
//!   also a decrease: a replaced page starts again), or when an answer
//!   handed over since the last frame raised a trip (chest button, heat, a
//!   fault) or bring-up raised one.
//! - **Limp until a person's wake.** Every start is limp, and after any trip
//!   every stiffness is 0 until a person wakes the robot in the armed epoch
//!   it is in now. The page's wake generation
//!   (`deathswitch::Snapshot::wake_generation`) mixes the last re-arm's
//!   random nonce and the registered runtime's: it exists only from the
//!   re-arm and the runtime's start that make it, and no one can read,
//!   guess or record it before them. A wake carries the generation its
//!   sender read, and counts only if this read finds the page armed in
//!   exactly that generation. Wall clocks are never compared. Every other
//!   wake is used up (and said in [`Verdict::change`]). A controller cannot
//!   wake the robot: commands are not an input here.
//!
//! A recording without `wake` lines replays the protocol model of
//! `docs/protocol.md`, which has no wake latch ([`WakeLatch::Off`]:
//! `docs/recording.md`); the runtime always runs with it on.
//!
//! **Bring-up** (`docs/bringup.md`) is one more input: while the gate holds
//! a [`BringUp`], only its one joint may be stiff, at its capped stiffness
//! and its target, whatever the command says; a bring-up trip makes this
//! frame limp and is handed to the switch.
//!
//! Pure: the read and the events are passed in, no clock, no I/O, no
//! allocation.

use deathswitch::{Motion, Reason, Snapshot};

use super::bringup::{BringUp, BringUpInput, BringUpVerdict, Readiness};
use crate::command::{Command, Joint, JOINTS};

/// Whether the gate holds the robot limp until a person's wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeLatch {
    /// Every start and every trip is limp until a wake in the armed
    /// generation (the runtime, and the replay of a recording with `wake`
    /// lines).
    On,
    /// The protocol model: a re-armed switch drives again from the next
    /// frame (the replay of a recording without `wake` lines).
    Off,
}

/// Where the wake latch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatchState {
    /// Commands pass.
    Awake,
    /// A trip was seen; the switch has not been read armed since.
    Tripped,
    /// Limp, the switch read armed: a wake that carries the page's wake
    /// generation at the read that takes it ends the wait.
    AwaitingWake,
}

/// What one decision changed (for the log; at most one a cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing changed.
    Unchanged,
    /// A trip was seen: limp until re-armed and woken.
    Tripped,
    /// The switch was read re-armed: still limp, waiting for a wake.
    Rearmed,
    /// A wake in the page's generation: commands pass again.
    Woken,
    /// A wake came while the switch is tripped: used up, no effect.
    WakeWhileTripped,
    /// A wake whose generation is not the page's wake generation at this
    /// read (read before a trip and its re-arm, before this runtime's start,
    /// from another page, or guessed): used up, no effect.
    WakeStale,
}

/// What the gate is given for one frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateInput<'a> {
    /// The switch as this cycle's one read found it.
    pub(crate) switch: &'a Snapshot,
    /// A person's wake taken before the read: the generation it carries.
    pub(crate) wake: Option<u64>,
    /// The bring-up inputs of this cycle (only while the gate holds a
    /// [`BringUp`]).
    pub(crate) bringup: Option<&'a BringUpInput<'a>>,
}

/// What this frame may do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// The frame counts as tripped: the switch tripped or lost, a trip since
    /// the last frame (count moved, an answer's or bring-up's trip).
    pub tripped: bool,
    /// Every stiffness is 0 in this frame (tripped, or waiting for a wake).
    pub limp: bool,
    /// The motion state this frame is built in (published in the page).
    pub motion: Motion,
    /// What this decision changed.
    pub change: Change,
    /// The reason the read found, if tripped (`page-lost` for a page found
    /// damaged or without its magic).
    pub reason: Option<Reason>,
    /// The page's trip count as read for this frame.
    pub(crate) trip_count: u64,
    /// Bring-up's verdict, while the gate holds a [`BringUp`].
    pub bringup: Option<BringUpVerdict>,
    /// A trip the gate raised itself (bring-up): the caller trips the switch
    /// with it.
    pub(crate) trip: Option<Reason>,
}

impl Verdict {
    /// The verdict of a frame that may do nothing: every stiffness 0 (the
    /// guard's frames; a replay's start-up).
    pub const LIMP: Verdict = Verdict {
        tripped: true,
        limp: true,
        motion: Motion::LimpTripped,
        change: Change::Unchanged,
        reason: None,
        trip_count: 0,
        bringup: None,
        trip: None,
    };

    /// The verdict of a frame that may do what its command says (the
    /// protocol model's armed switch; the cycle's tests).
    #[cfg(test)]
    pub(crate) const AWAKE: Verdict = Verdict {
        tripped: false,
        limp: false,
        motion: Motion::Awake,
        change: Change::Unchanged,
        reason: None,
        trip_count: 0,
        bringup: None,
        trip: None,
    };

    /// Applies the verdict to the command the frame is built from (the
    /// protocol core's held command, so a silent controller can never bring
    /// a stiff command back). The one place that sets a stiffness to 0
    /// because of the switch: limp, every stiffness 0; in bring-up, every
    /// joint but the one at 0 and that one at bring-up's stiffness and
    /// target. Positions, LEDs and sonar pass otherwise.
    pub(crate) fn apply(&self, command: &mut Command) {
        if self.limp {
            command.stiffness = [0.0; JOINTS];
            return;
        }
        if let Some(b) = &self.bringup {
            for (j, s) in command.stiffness.iter_mut().enumerate() {
                *s = Joint::from_index(j).map_or(0.0, |joint| b.joint_stiffness(joint));
            }
            command.position[b.joint.index()] = b.target;
        }
    }
}

/// The gate's state between two frames: the trip latch and the wake latch
/// as one state machine. Pure; no time, no I/O.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    wake_latch: WakeLatch,
    state: LatchState,
    /// The trip count read for the last frame (`None`: no frame yet).
    seen_count: Option<u64>,
    /// An answer raised a trip since the last frame.
    answer_trip: bool,
    bringup: Option<BringUp>,
}

impl Gate {
    /// The gate of a runtime that found the switch as `start` says when it
    /// started. Limp either way with the wake latch on: every start waits
    /// for a person's wake that comes after it (an armed page at start is a
    /// restart's or a hand-over's, not a person's wake). A trip and a re-arm
    /// between this read and the first frame make the first frame tripped.
    pub(crate) fn new(start: &Snapshot, wake_latch: WakeLatch) -> Gate {
        let tripped = !start.armed;
        // Mutation (the world's, `docs/world.md`): an armed start is awake.
        #[cfg(feature = "mutations")]
        let wake_latch =
            if !tripped && nao_kit::mutation::on(nao_kit::mutation::Mutation::StartAwake) {
                return Gate {
                    wake_latch,
                    state: LatchState::Awake,
                    seen_count: Some(start.trip_count),
                    answer_trip: false,
                    bringup: None,
                };
            } else {
                wake_latch
            };
        Gate {
            wake_latch,
            state: if tripped {
                LatchState::Tripped
            } else if wake_latch == WakeLatch::On {
                LatchState::AwaitingWake
            } else {
                LatchState::Awake
            },
            seen_count: Some(start.trip_count),
            answer_trip: false,
            bringup: None,
        }
    }

    /// This gate in bring-up: only `bringup`'s joint may be stiff.
    pub(crate) fn with_bringup(mut self, bringup: BringUp) -> Gate {
        self.bringup = Some(bringup);
        self
    }

    /// The bring-up the gate holds, if any.
    pub(crate) fn bringup(&self) -> Option<&BringUp> {
        self.bringup.as_ref()
    }

    /// Where the wake latch is.
    #[cfg(test)]
    pub(crate) fn state(&self) -> LatchState {
        self.state
    }

    /// An answer handed over raised a trip: the next frame is tripped.
    pub(crate) fn answer_tripped(&mut self) {
        self.answer_trip = true;
    }

    /// Decides this frame: what the read and the events allow, and the
    /// latched state for the next one.
    pub(crate) fn decide(&mut self, input: &GateInput<'_>) -> Verdict {
        let s = input.switch;
        let count = s.trip_count;
        let read_tripped = !s.armed;
        // A trip and a re-arm between two reads (any change of the count).
        let count_moved = self.seen_count.is_some_and(|c| c != count);
        self.seen_count = Some(count);
        let answer_trip = std::mem::take(&mut self.answer_trip);
        let latch_trip = read_tripped || answer_trip;
        let mut tripped = latch_trip || count_moved;
        let mut change = self.latch(latch_trip, count_moved, s.wake_generation(), input.wake);

        // Bring-up: one more input, judged with what the switch allows now.
        let mut bringup = None;
        let mut trip = None;
        if let (Some(b), Some(bi)) = (self.bringup.as_mut(), input.bringup) {
            let ready = Readiness {
                armed: !tripped,
                woken: self.state == LatchState::Awake,
            };
            let v = b.step(bi, ready);
            if v.trip.is_some() && !tripped {
                trip = v.trip;
                tripped = true;
                self.state = LatchState::Tripped;
                change = Change::Tripped;
            }
            bringup = Some(v);
        }

        let waiting = self.wake_latch == WakeLatch::On && self.state != LatchState::Awake;
        let motion = if tripped {
            Motion::LimpTripped
        } else if waiting {
            Motion::LimpWaitingForWake
        } else if bringup.is_some() {
            Motion::BringUp
        } else {
            Motion::Awake
        };
        Verdict {
            tripped,
            limp: tripped || waiting,
            motion,
            change,
            reason: read_tripped.then(|| s.reason.unwrap_or(Reason::PageLost)),
            trip_count: count,
            bringup,
            trip,
        }
    }

    /// The wake latch's step: `trip` a trip read now (the switch, an
    /// answer's), `count_moved` the count changed since the last read,
    /// `generation` the page's wake generation at this read.
    fn latch(
        &mut self,
        trip: bool,
        count_moved: bool,
        generation: Option<u64>,
        wake: Option<u64>,
    ) -> Change {
        let was = self.state;
        if trip {
            self.state = LatchState::Tripped;
            return if was != LatchState::Tripped {
                Change::Tripped
            } else if wake.is_some() {
                Change::WakeWhileTripped
            } else {
                Change::Unchanged
            };
        }
        // Armed now.
        let mut change = Change::Unchanged;
        if count_moved || was == LatchState::Tripped {
            change = match was {
                // A trip and a re-arm between two reads.
                LatchState::Awake => Change::Tripped,
                LatchState::Tripped => Change::Rearmed,
                LatchState::AwaitingWake => Change::Unchanged,
            };
            self.state = LatchState::AwaitingWake;
        }
        if self.wake_latch == WakeLatch::Off {
            // The protocol model: armed drives (the frame of a count that
            // moved is still tripped).
            self.state = LatchState::Awake;
            return change;
        }
        if self.state == LatchState::Awake {
            return change;
        }
        match wake {
            // A generation exists only from its re-arm and its runtime's
            // start on: a wake that carries it was formed after both.
            Some(g) if Some(g) == generation => {
                self.state = LatchState::Awake;
                Change::Woken
            }
            Some(_) => Change::WakeStale,
            None => change,
        }
    }
}

#[cfg(test)]
mod tests;
