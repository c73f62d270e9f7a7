//! The runtime's step: one cycle of the robot, as the runtime runs it and as
//! `nao-rs replay` replays it.
//!
//! [`Step::run`] reads the death switch once ([`Switch::read`]), asks the
//! gate what this frame may do (`Gate::decide`), hands a trip the gate
//! raised to the switch, lets the caller see what was read and decided (the
//! recorder writes its input lines there), runs the protocol core's cycle
//! ([`Cycle::run`]: the verdict on the held command, each joint's values,
//! the frame, the USB exchange, the answer), writes the heartbeat
//! ([`Switch::beat`]) and trips the switch on a trip the answer raised
//! (the chest button through its rule, [`crate::protocol::chest_button`]).
//!
//! Pure but for the link and the switch it is handed: time comes in, and
//! only in ([`StepInput::now_ns`]: the rules judge it in whole ms, the
//! heartbeat is stamped with it; the step reads no clock), nothing
//! allocates, nothing is logged. The
//! runtime's cycle actor (`nao-runtime`) and the replay ([`crate::replay`])
//! drive this same code; only their switch (the page, or
//! `deathswitch::MemorySwitch`) and their link differ.

use deathswitch::{Beat, Reason, Snapshot, Switch};

use crate::command::Command;
use crate::link::Link;
use crate::protocol::bringup::{BringUp, BringUpInput, Jog};
use crate::protocol::chest_button::{ChestButton, ChestButtonMode};
use crate::protocol::cycle::{Cycle, CycleInput, CycleOutput};
use crate::protocol::gate::{Gate, GateInput, Verdict, WakeLatch};
use crate::protocol::prefs::PressureCalibration;
use crate::protocol::startup::Identity;
use crate::protocol::tables::joint_board;

/// The time the step's rules judge: `now_ns` rounded down to whole ms, as
/// a recording's `cycle` line holds it, so a replay judges the times the
/// run judged (differences of whole ms are the same whether counted from
/// boot or from the session's start).
fn rule_time_ns(now_ns: u64) -> u64 {
    now_ns - now_ns % 1_000_000
}

/// What one step is given besides the switch and the link.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepInput<'a> {
    /// The controller's command for this cycle (`None`: silence; the
    /// protocol core keeps the last one, under the gate's verdict).
    pub command: Option<&'a Command>,
    /// A person's wake taken before the read: the generation it carries.
    pub wake: Option<u64>,
    /// A person's jog step (bring-up only).
    pub jog: Option<Jog>,
    /// The cycle's start, monotonic ns: the step's one time source, read
    /// once a tick from the runtime's clock by its cycle actor (a replay
    /// gives its `cycle` line's time). The rules (bring-up, the chest
    /// button, the protocol core's cycle) see it in whole ms
    /// (rounded down), as a recording's `cycle` lines hold it; the
    /// heartbeat ([`Beat::t_ns`]) is stamped with it as given.
    pub now_ns: u64,
    /// The safety status bits published with this step's heartbeat.
    pub safety_flags: u32,
}

/// What the step read and decided, before the frame is built.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The cycle's number.
    pub k: u64,
    /// The switch as read for this frame.
    pub switch: &'a Snapshot,
    /// What the frame may do.
    pub verdict: &'a Verdict,
    /// The step's input.
    pub input: &'a StepInput<'a>,
}

/// What one step did.
#[derive(Debug, Clone, Copy)]
pub struct StepOutput {
    /// The switch as read for this frame.
    pub switch: Snapshot,
    /// What the frame was allowed to do.
    pub verdict: Verdict,
    /// What the protocol core's cycle did.
    pub cycle: CycleOutput,
    /// The trip the answer raised (handed to the switch), if any.
    pub answer_trip: Option<Reason>,
}

/// The runtime's step: the gate and the protocol core's cycle.
#[derive(Debug, Clone)]
pub struct Step {
    gate: Gate,
    cycle: Cycle,
    chest_button: ChestButton,
    foot_calibration: [[PressureCalibration; 4]; 2],
}

impl Step {
    /// The step of a robot that started up as `identity`, with `accepted`
    /// motor board versions, and the switch as read at the start (`start`):
    /// with the wake latch on, every start is limp until a person's wake.
    pub fn new(identity: &Identity, accepted: &[u8], start: &Snapshot, wake: WakeLatch) -> Step {
        Step {
            gate: Gate::new(start, wake),
            cycle: Cycle::from_identity(identity, accepted),
            chest_button: ChestButton::new(ChestButtonMode::Trip),
            foot_calibration: identity.prefs.foot_pressure,
        }
    }

    /// This step in bring-up (`docs/bringup.md`): only `bringup`'s joint may
    /// be stiff.
    pub fn with_bringup(mut self, bringup: BringUp) -> Step {
        self.gate = self.gate.with_bringup(bringup);
        self
    }

    /// This step with the chest button rule in `mode`
    /// ([`crate::protocol::chest_button`]; without it: `trip`, every press
    /// trips).
    pub fn with_chest_button(mut self, mode: ChestButtonMode) -> Step {
        self.chest_button = ChestButton::new(mode);
        self
    }

    /// The protocol core's cycle (its sensors, handshake and number).
    pub(crate) fn cycle(&self) -> &Cycle {
        &self.cycle
    }

    /// One cycle on `link` with `switch`; `observe` is called after the
    /// read and the decision, before the frame is built (with the link: the
    /// recorder writes its input lines there).
    pub fn run<S, L, H>(
        &mut self,
        switch: &S,
        link: &mut L,
        input: &StepInput<'_>,
        mut observe: H,
    ) -> StepOutput
    where
        S: Switch + ?Sized,
        L: Link,
        H: FnMut(&mut L, &Observed<'_>),
    {
        let now_ns = rule_time_ns(input.now_ns);
        let read = switch.read();
        let bringup_input = self.gate.bringup().map(|b| {
            let joint = b.joint();
            BringUpInput {
                sensors: self.cycle.sensors(),
                foot_calibration: &self.foot_calibration,
                board_accepted: self
                    .cycle
                    .handshake()
                    .is_accepted(joint_board(joint.index())),
                now_ns,
                jog: input.jog,
            }
        });
        let verdict = self.gate.decide(&GateInput {
            switch: &read,
            wake: input.wake,
            bringup: bringup_input.as_ref(),
        });
        if let Some(r) = verdict.trip {
            switch.trip(r);
        }
        observe(
            link,
            &Observed {
                k: self.cycle.k(),
                switch: &read,
                verdict: &verdict,
                input,
            },
        );
        let mut out = self.cycle.run(
            link,
            &CycleInput {
                command: input.command,
                verdict: &verdict,
            },
            now_ns,
        );
        // Which press trips: the chest button rule, with the step's time
        // (in `trip` mode exactly the answer's own: every press).
        out.trips.chest_button = self.chest_button.step(out.trips.chest_seen, now_ns);
        // The heartbeat after the frame: motion and flags, then
        // confirmation, time, cycle. Stamped with the cycle's start (read
        // before the switch): a beat at or after a trip's time comes from
        // a cycle that read the switch after the trip.
        switch.beat(&Beat {
            cycle: out.k,
            t_ns: input.now_ns,
            all_off: out.all_off,
            motion: verdict.motion,
            safety_flags: input.safety_flags,
        });
        let answer_trip = out.trips.reason();
        if let Some(r) = answer_trip {
            switch.trip(r);
            self.gate.answer_tripped();
        }
        StepOutput {
            switch: read,
            verdict,
            cycle: out,
            answer_trip,
        }
    }
}
