//! The program's side of the runtime: the command ring, each cycle's
//! sensors, and the switch (trip only: no call re-arms).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nao_wire::protocol::devices::{Battery, Imu};
use nao_wire::{Command, JOINTS};

use super::flags::SafetyFlags;
use deathswitch::Reason;
use nao_kit::notify::Notify;
use nao_wire::protocol::bringup::BringUpVerdict;

/// The death switch as one cycle saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwitchState {
    /// Tripped (or the page lost) when the frame was built.
    pub tripped: bool,
    /// The reason stored in the page, if tripped.
    pub reason: Option<Reason>,
    /// The page was found damaged or gone (and not re-armed since).
    pub page_lost: bool,
    /// The gate held every stiffness at 0 in this frame:
    /// tripped, or re-armed and not yet woken (`nao-rs wake`). A controller
    /// may use it to start its motion afresh once it ends.
    pub limp: bool,
}

/// One cycle's sensors and state, as the program reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SensorFrame {
    /// The cycle number (0 for the first cycle after start-up).
    pub cycle: u64,
    /// The cycle's start, ns since the runtime started (full precision
    /// u64, never a float).
    pub t_ns: u64,
    /// Joint positions, radians, joint index order.
    pub position: [f32; JOINTS],
    /// Joint currents, mA.
    pub current_ma: [u16; JOINTS],
    /// Joint temperatures, degC.
    pub temperature: [i8; JOINTS],
    /// Joint board status bytes (bit 0: fault).
    pub joint_status: [u8; JOINTS],
    /// The stiffness sent in this cycle's frame, per mille.
    pub stiffness_sent: [u16; JOINTS],
    /// The inertial unit.
    pub imu: Imu,
    /// The battery.
    pub battery: Battery,
    /// Sonar left, right, mm.
    pub sonar_mm: [u16; 2],
    /// Foot pressure sensors, raw: left foot then right foot.
    pub foot_pressure: [[u16; 4]; 2],
    /// Foot bumpers (bit 0 left, bit 1 right), left foot then right foot.
    pub bumpers: [u8; 2],
    /// The chest button is pressed.
    pub chest_button: bool,
    /// The switch when this cycle's frame was built.
    pub switch: SwitchState,
    /// Bring-up's verdict for this frame (only in bring-up): the joint, its
    /// stiffness and target, the precondition missing, a trip.
    pub bringup: Option<BringUpVerdict>,
    /// Every joint's stiffness in this cycle's frame was 0.
    pub all_off: bool,
    /// The safety status bits.
    pub safety: SafetyFlags,
    /// How late this cycle started, ns.
    pub lateness_ns: u64,
}

impl Default for SensorFrame {
    fn default() -> Self {
        SensorFrame {
            cycle: 0,
            t_ns: 0,
            position: [0.0; JOINTS],
            current_ma: [0; JOINTS],
            temperature: [0; JOINTS],
            joint_status: [0; JOINTS],
            stiffness_sent: [0; JOINTS],
            imu: Imu::default(),
            battery: Battery::default(),
            sonar_mm: [0; 2],
            foot_pressure: [[0; 4]; 2],
            bumpers: [0; 2],
            chest_button: false,
            switch: SwitchState::default(),
            bringup: None,
            all_off: true,
            safety: SafetyFlags::empty(),
            lateness_ns: 0,
        }
    }
}

/// The latest sensors, shared by the cycle (writer) and the program.
///
/// The cycle only ever `try_lock`s: if the program holds the lock at that
/// instant (a copy of a few hundred bytes) the cycle skips publishing once;
/// it never waits.
///
/// Not a channel: the program wants the newest frame, not every frame in
/// turn, and the real-time cycle must neither wait nor allocate; one slot
/// and a futex counter ([`Notify`]) give both.
#[derive(Debug, Default)]
pub(crate) struct Latest {
    frame: Mutex<SensorFrame>,
    published: AtomicU64,
    notify: Notify,
}

impl Latest {
    /// Publishes `frame` without blocking (the cycle's side).
    pub(crate) fn publish(&self, frame: &SensorFrame) {
        if let Ok(mut f) = self.frame.try_lock() {
            *f = *frame;
            drop(f);
            // Release: pairs with the Acquire in `published`, after the
            // copy above.
            self.published.fetch_add(1, Ordering::Release);
            self.notify.notify();
        }
    }

    /// How many frames were published.
    pub(crate) fn published(&self) -> u64 {
        // Acquire: pairs with the Release in `publish`.
        self.published.load(Ordering::Acquire)
    }

    /// A copy of the latest frame.
    pub(crate) fn read(&self) -> SensorFrame {
        *self.frame.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout_ns` for a frame newer than publication number
    /// `after`; returns it with its number.
    pub(crate) fn wait_newer(&self, after: u64, timeout_ns: u64) -> Option<(u64, SensorFrame)> {
        let deadline = nao_kit::clock::monotonic_ns().saturating_add(timeout_ns);
        loop {
            let seen = self.notify.current();
            let n = self.published();
            if n > after {
                return Some((n, self.read()));
            }
            let now = nao_kit::clock::monotonic_ns();
            if now >= deadline {
                return None;
            }
            self.notify.wait(seen, deadline - now);
        }
    }
}

/// The program's end of the runtime (move it into the controller thread).
pub struct ProgramIo {
    pub(crate) commands: rtrb::Producer<Command>,
    pub(crate) latest: Arc<Latest>,
    pub(crate) seen: u64,
    pub(crate) handle: super::Handle,
}

impl ProgramIo {
    /// Queues a command for the next cycle. A full ring hands it back (by
    /// value: no allocation on this path).
    ///
    /// # Errors
    ///
    /// The ring is full: the command comes back.
    #[allow(clippy::result_large_err)]
    pub fn push_command(&mut self, command: Command) -> Result<(), Command> {
        self.commands
            .push(command)
            .map_err(|rtrb::PushError::Full(c)| c)
    }

    /// Waits for the next cycle's sensors (newer than the last one this
    /// `ProgramIo` returned), at most `timeout_ns`. `None` on timeout or
    /// when the runtime has stopped.
    pub fn next_sensors(&mut self, timeout_ns: u64) -> Option<SensorFrame> {
        if !self.handle.is_running() && self.latest.published() <= self.seen {
            return None;
        }
        let (n, f) = self.latest.wait_newer(self.seen, timeout_ns)?;
        self.seen = n;
        Some(f)
    }

    /// The runtime's handle: trip, wake, stop, the latest sensors at once
    /// ([`super::Handle`]; one place for each, shared with every thread).
    pub fn handle(&self) -> &super::Handle {
        &self.handle
    }
}
