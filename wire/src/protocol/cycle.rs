//! The cycle (`docs/protocol.md` sections 7 to 10): inputs, safety, each joint's values,
//! the frame in HAL's order, the client state request, the USB exchange,
//! handing the answer to the devices, and the reconnect rule.
//!
//! [`Cycle::run`] does one whole cycle on a [`Link`] in these steps (the
//! steps are the crate's own, so that its tests drive a cycle without a
//! link, giving it any answer):
//!
//! 1. `Cycle::build` (inputs, safety, joints, frame) returns the frame;
//! 2. `Cycle::client_state_request` / `Cycle::client_state_result`;
//! 3. read the previous answer if `Cycle::reads_previous`, write the frame;
//! 4. complete the cycle with what the read and the write did: hands the
//!    answer over, counts failures, ends the cycle;
//! 5. if [`CycleOutput::reconnect_needed`]: close the link, run
//!    [`link_up`], then [`Cycle::link_restarted`].
//!
//! All buffers are made in the constructors; no step allocates.

use super::devices::{hand_answer, Sensors, Trips};
use super::frame::{Frame, FrameError, FrameWriter, MAX_FRAME_LEN};
use super::gate::Verdict;
use super::handshake::Handshake;
use super::joints::joint_values;
use super::safety::{Levels, Safety};
use super::startup::{link_up, Identity};
use super::tables::*;
use crate::command::{Command, JOINTS};
use crate::link::{Link, LinkError};

/// The exchange that fails this many times in a row ends with a reconnect.
pub(crate) const RECONNECT_AFTER_FAILURES: u32 = 11;
/// Zero position assumed by guard mode for a joint not yet measured (the
/// guard reads no preferences).
pub(crate) const GUARD_ZERO: u16 = 2048;
/// Seq of cycle 0's frame (the start-up frames are 0 and 1).
pub(crate) const FIRST_CYCLE_SEQ: u16 = 2;

/// What the cycle is given: the controller's command for this cycle (none:
/// silence) and the gate's verdict for this frame.
#[derive(Debug, Clone, Copy)]
pub struct CycleInput<'a> {
    /// A new command from the controller for this cycle, or `None`.
    pub command: Option<&'a Command>,
    /// What the frame may do ([`super::gate`]): applied to the held command
    /// before each joint's values are taken.
    pub verdict: &'a Verdict,
}

impl CycleInput<'_> {
    /// Whether this cycle's frame is built from a new command, what HAL's
    /// controller-lost ramp counts (`docs/protocol.md` section 9): the
    /// controller sent one for this cycle, or the gate's verdict carries
    /// bring-up's (in bring-up the gate is the joint's one controller: it
    /// decides the joint's stiffness and target anew every cycle, from the
    /// answer read and the person's hand on the toe bumper, and ignores
    /// every other command; `docs/bringup.md`). The ramp fades what a
    /// controller that went silent left held; bring-up leaves nothing held,
    /// its hold-to-run makes the joint limp from the frame after a release.
    pub(crate) fn new_command(&self) -> bool {
        self.command.is_some() || self.verdict.bringup.is_some()
    }
}

/// Why an exchange failed (`docs/protocol.md` section 7, step 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeFailure {
    /// Reading the answer failed.
    Read(LinkError),
    /// The answer's sync, CRC, seq or layout is wrong.
    Answer(FrameError),
    /// Writing the frame failed.
    Write(LinkError),
}

/// What the read of the previous answer gave.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadResult<'a> {
    /// Not read: the previous cycle's write on this link failed, or this is
    /// the first cycle on the link.
    Skipped,
    /// The read failed.
    Failed(LinkError),
    /// The bytes read.
    Answer(&'a [u8]),
}

/// What a reconnect did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconnect {
    /// No reconnect this cycle.
    None,
    /// The link was closed and step 1 of the start-up succeeded.
    Done,
    /// The link was closed and step 1 failed; the next cycles go on (their
    /// writes fail) and the next reconnect follows 11 failures later.
    Failed,
}

/// What one cycle did and knows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleOutput {
    /// The cycle's number.
    pub k: u64,
    /// The seq of its frame.
    pub seq: u16,
    /// Trips raised by the answer handed over in this cycle.
    pub trips: Trips,
    /// Every joint's stiffness in the frame was 0.
    pub all_off: bool,
    /// The frame's write succeeded (with `all_off`: an all-off frame reached
    /// the board, the heartbeat's confirmation).
    pub frame_written: bool,
    /// The safety levels used for the frame.
    pub levels: Levels,
    /// Stiffness per joint as sent (per mille).
    pub stiffness: [u16; JOINTS],
    /// Position count per joint as sent.
    pub position_count: [u16; JOINTS],
    /// This cycle's CLIENT_STATE request, if any, and whether it succeeded.
    pub client_state: Option<(u8, bool)>,
    /// Why this cycle's exchange failed, if it did.
    pub failure: Option<ExchangeFailure>,
    /// Failed exchanges in a row, this one included.
    pub failed_exchanges: u32,
    /// The 11th failure in a row: the link must be closed and brought up.
    pub reconnect_needed: bool,
    /// What [`Cycle::run`]'s reconnect did.
    pub reconnect: Reconnect,
    /// Bit i: handshake board i ([`HANDSHAKE_BOARDS`]) accepted.
    pub accepted_boards: u16,
    /// Bit i: handshake board i rejected.
    pub rejected_boards: u16,
    /// Every device's latest data after this cycle's hand-over.
    pub sensors: Sensors,
}

/// The cycle's state apart from its two buffers.
#[derive(Debug, Clone)]
struct Core {
    k: u64,
    zero: [u16; JOINTS],
    command: Command,
    safety: Safety,
    handshake: Handshake,
    sensors: Sensors,
    levels: Levels,
    stiffness: [u16; JOINTS],
    position: [u16; JOINTS],
    seq: u16,
    /// The client state last sent on this link.
    client_sent: u8,
    client_request: Option<u8>,
    client_result: Option<bool>,
    /// The previous cycle's write on this link succeeded.
    prev_write_ok: bool,
    failures: u32,
}

/// One cycle after another, with every buffer made in the constructor.
#[derive(Debug, Clone)]
pub struct Cycle {
    core: Core,
    frame: [u8; MAX_FRAME_LEN],
    answer: [u8; BULK_IN_LEN],
}

impl Cycle {
    /// The runtime's cycle after start-up: `zero` from the preferences,
    /// `accepted` configuration versions (HAL's default: `[10]`).
    pub(crate) fn new(zero: [u16; JOINTS], accepted: &[u8]) -> Cycle {
        Self::with_handshake(zero, Handshake::new(accepted))
    }

    /// The runtime's cycle for a robot that started up as `identity`.
    pub(crate) fn from_identity(identity: &Identity, accepted: &[u8]) -> Cycle {
        Self::new(identity.prefs.zero, accepted)
    }

    /// Guard mode (after [`link_up`] only): every stiffness 0 from the first
    /// frame, no CONFIG_REQUEST, no board accepted. Joints not yet measured
    /// are sent at zero position 2048 (the guard reads no preferences).
    pub fn guard() -> Cycle {
        Self::with_handshake([GUARD_ZERO; JOINTS], Handshake::none_accepted())
    }

    fn with_handshake(zero: [u16; JOINTS], handshake: Handshake) -> Cycle {
        Cycle {
            core: Core {
                k: 0,
                zero,
                command: Command::default(),
                safety: Safety::new(),
                handshake,
                sensors: Sensors::new(&zero),
                levels: Levels::default(),
                stiffness: [0; JOINTS],
                position: zero,
                seq: FIRST_CYCLE_SEQ,
                client_sent: CLIENT_DISCONNECTED,
                client_request: None,
                client_result: None,
                prev_write_ok: false,
                failures: 0,
            },
            frame: [0; MAX_FRAME_LEN],
            answer: [0; BULK_IN_LEN],
        }
    }

    /// The number of the next cycle.
    pub(crate) fn k(&self) -> u64 {
        self.core.k
    }

    /// The seq of the next cycle's frame: `(k + 2) mod 65536`.
    pub(crate) fn seq(&self) -> u16 {
        (self.core.k.wrapping_add(FIRST_CYCLE_SEQ as u64)) as u16
    }

    /// Every device's latest data.
    pub(crate) fn sensors(&self) -> &Sensors {
        &self.core.sensors
    }

    /// The handshake.
    pub(crate) fn handshake(&self) -> &Handshake {
        &self.core.handshake
    }

    /// Steps 1 to 3: takes the inputs, updates the safety levels and each
    /// joint's values, and builds the frame (returned; it stays in the
    /// cycle's buffer for the write). `now_ns` is the cycle's start, monotonic ns.
    pub(crate) fn build(&mut self, input: &CycleInput<'_>, now_ns: u64) -> &[u8] {
        let seq = self.seq();
        let c = &mut self.core;
        c.seq = seq;
        if let Some(cmd) = input.command {
            c.command = *cmd;
        }
        c.levels = c
            .safety
            .step(now_ns, input.new_command(), c.sensors.battery.current_ma);
        let mut accepted = [false; JOINT_BOARD_COUNT];
        for (b, a) in accepted.iter_mut().enumerate() {
            *a = c.handshake.is_accepted(b);
        }
        // The gate's verdict on the held command: a trip makes it limp, so
        // a silent controller never brings a command from before the trip
        // back. LEDs and sonar keep the controller's values.
        input.verdict.apply(&mut c.command);
        (c.stiffness, c.position) = joint_values(
            &c.command,
            &c.levels,
            &accepted,
            &c.zero,
            &c.sensors.position_count,
        );
        debug_assert!(
            !input.verdict.limp || c.stiffness.iter().all(|&s| s == 0),
            "a limp verdict sends every stiffness 0"
        );
        c.client_request = (c.client_sent != CLIENT_CONNECTED).then_some(CLIENT_CONNECTED);
        c.client_result = None;
        let len = build_frame(c, &mut self.frame);
        &self.frame[..len]
    }

    /// The CLIENT_STATE to send before this cycle's exchange, if any
    /// (wValue; the request is `control_out 40 05 <state> 0000 -`).
    pub(crate) fn client_state_request(&self) -> Option<u8> {
        self.core.client_request
    }

    /// Whether the CLIENT_STATE request succeeded.
    pub(crate) fn client_state_result(&mut self, ok: bool) {
        let c = &mut self.core;
        if let Some(state) = c.client_request {
            c.client_result = Some(ok);
            if ok {
                c.client_sent = state;
            }
        }
    }

    /// Whether this cycle reads the answer to the previous frame (only when
    /// the previous cycle's write on this link succeeded).
    pub(crate) fn reads_previous(&self) -> bool {
        self.core.prev_write_ok
    }

    /// Step 5's end: hands the answer over (after the write) and counts the
    /// failure, if any; ends the cycle. `write` is the frame write's result.
    /// ([`Cycle::run`] does the same on its own answer buffer.)
    #[cfg(test)]
    pub(crate) fn complete(
        &mut self,
        read: ReadResult<'_>,
        write: Result<(), LinkError>,
    ) -> CycleOutput {
        self.core.complete(read, write)
    }

    /// After a reconnect, whether or not its link step succeeded: the new
    /// link is fresh (client state 0, nothing written on it yet).
    pub fn link_restarted(&mut self) {
        let c = &mut self.core;
        c.client_sent = CLIENT_DISCONNECTED;
        c.prev_write_ok = false;
        c.failures = 0;
    }

    /// One whole cycle on `link` at `now_ns` (the cycle's start).
    pub fn run(&mut self, link: &mut dyn Link, input: &CycleInput<'_>, now_ns: u64) -> CycleOutput {
        let len = self.build(input, now_ns).len();
        if let Some(state) = self.client_state_request() {
            let request = VendorRequest::ClientState;
            let ok = link
                .control_out(request.request_type(), request.into(), state as u16, 0, &[])
                .is_ok();
            self.client_state_result(ok);
        }
        // Step 5: read the previous answer, write this frame, hand over.
        let read = if self.reads_previous() {
            Some(
                link.bulk_in(EP_IN, &mut self.answer)
                    .map(|n| n.min(BULK_IN_LEN)),
            )
        } else {
            None
        };
        let write = match link.bulk_out(EP_OUT, &self.frame[..len]) {
            Ok(n) if n == len => Ok(()),
            Ok(_) => Err(LinkError::Other),
            Err(e) => Err(e),
        };
        let read = match &read {
            None => ReadResult::Skipped,
            Some(Ok(n)) => ReadResult::Answer(&self.answer[..*n]),
            Some(Err(e)) => ReadResult::Failed(*e),
        };
        let mut out = self.core.complete(read, write);
        if out.reconnect_needed {
            link.close();
            let ok = link_up(link).is_ok();
            self.link_restarted();
            out.reconnect = if ok {
                Reconnect::Done
            } else {
                Reconnect::Failed
            };
        }
        out
    }
}

/// Step 3: the frame in HAL's order.
fn build_frame(c: &Core, buf: &mut [u8; MAX_FRAME_LEN]) -> usize {
    // The largest frame (43 messages, 244 bytes) fits 512 bytes, so no push
    // below can fail; an error would leave a shorter but valid frame.
    let Ok(mut w) = FrameWriter::frame(buf, c.seq) else {
        return 0;
    };
    let push = |w: &mut FrameWriter<'_>, a: u8, cmd: BoardCommand, p: &[u8]| {
        let _ = w.push(a, cmd.into(), p);
    };
    for a in DEVICES {
        push(&mut w, a, BoardCommand::Read, &[]);
    }
    for bus in [Bus::A, Bus::B] {
        let slots = bus.slots();
        let _ = w.push_u16s(
            bus.address(),
            BoardCommand::Positions.into(),
            slots.iter().map(|&j| c.position[j]),
        );
        let _ = w.push_u16s(
            bus.address(),
            BoardCommand::Stiffness.into(),
            slots.iter().map(|&j| c.stiffness[j]),
        );
    }
    if c.client_request.is_none() {
        push(
            &mut w,
            ADDR_CHEST,
            BoardCommand::ChestLed,
            &c.command.chest_led,
        );
    }
    push(
        &mut w,
        ADDR_LEFT_FOOT,
        BoardCommand::FootLed,
        &c.command.left_foot_led,
    );
    push(
        &mut w,
        ADDR_RIGHT_FOOT,
        BoardCommand::FootLed,
        &c.command.right_foot_led,
    );
    push(
        &mut w,
        ADDR_SONAR,
        BoardCommand::SonarMode,
        &[c.command.sonar_mode],
    );
    for (i, &a) in HANDSHAKE_BOARDS.iter().enumerate() {
        if c.handshake.asks(i, c.k) {
            push(&mut w, a, BoardCommand::ConfigRequest, &[]);
        }
    }
    w.finish()
}

impl Core {
    fn complete(&mut self, read: ReadResult<'_>, write: Result<(), LinkError>) -> CycleOutput {
        let mut failure = None;
        let mut trips = Trips::default();
        let expected_seq = self.seq.wrapping_sub(1);
        let answer = match read {
            ReadResult::Skipped => None,
            ReadResult::Failed(f) => {
                failure = Some(ExchangeFailure::Read(f));
                None
            }
            ReadResult::Answer(bytes) => match Frame::parse_answer(bytes, expected_seq) {
                Ok(frame) => Some(frame),
                Err(e) => {
                    failure = Some(ExchangeFailure::Answer(e));
                    None
                }
            },
        };
        if let Err(f) = write {
            failure = failure.or(Some(ExchangeFailure::Write(f)));
        }
        if let Some(frame) = answer {
            trips = hand_answer(&frame, &self.zero, &mut self.sensors, &mut self.handshake);
        }
        self.handshake.end_of_cycle(self.k);
        self.prev_write_ok = write.is_ok();
        self.failures = if failure.is_some() {
            self.failures.saturating_add(1)
        } else {
            0
        };
        let out = CycleOutput {
            k: self.k,
            seq: self.seq,
            trips,
            all_off: self.stiffness.iter().all(|&s| s == 0),
            frame_written: write.is_ok(),
            levels: self.levels,
            stiffness: self.stiffness,
            position_count: self.position,
            client_state: self
                .client_request
                .map(|s| (s, self.client_result.unwrap_or(false))),
            failure,
            failed_exchanges: self.failures,
            reconnect_needed: self.failures >= RECONNECT_AFTER_FAILURES,
            reconnect: Reconnect::None,
            accepted_boards: self.handshake.accepted_mask(),
            rejected_boards: self.handshake.rejected_mask(),
            sensors: self.sensors,
        };
        self.k = self.k.wrapping_add(1);
        out
    }
}
