//! Trip, wake, jog and stop the runtime from any thread ([`Handle`]), and
//! what its cycle publishes for status displays ([`Status`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use deathswitch::{Reason, Switch};
use nao_wire::protocol::bringup::Jog;

use crate::program::{self, SensorFrame, SwitchState};
use crate::wake::{self, WakeRefused};

/// What the cycle publishes for status displays (not for control).
#[derive(Debug, Default)]
pub struct Status {
    /// The last cycle's number + 1 (0: none yet).
    pub cycles: AtomicU64,
    /// The last cycle's lateness, ns.
    pub lateness_ns: AtomicU64,
    /// The largest lateness so far, ns.
    pub max_lateness_ns: AtomicU64,
    /// Deadlines skipped so far.
    pub overruns: AtomicU64,
    /// The largest stiffness in the last frame, per mille.
    pub max_stiffness: AtomicU32,
    /// The safety flags of the last cycle.
    pub flags: AtomicU32,
    /// 1 while the last frame was built with the switch tripped.
    pub tripped: AtomicU32,
    /// 1 while the wake latch held every stiffness at 0 in the last frame
    /// (tripped, or re-armed and not yet woken).
    pub limp: AtomicU32,
    /// The motion state of the last frame ([`deathswitch::Motion::code`]), as published
    /// in the page.
    pub motion: AtomicU32,
    /// Allocations made by the cycle thread from its first cycle on, as
    /// counted by `nao_kit::alloc::CountingAlloc` (0 without it; see
    /// `nao_kit::alloc::installed`). Goal: 0.
    pub cycle_allocations: AtomicU64,
}

/// Trip and stop from any thread; cheap to clone.
#[derive(Clone)]
pub struct Handle {
    pub(crate) switch: Arc<dyn Switch>,
    pub(crate) wake: Arc<wake::WakeSignal>,
    pub(crate) jog: Arc<JogSignal>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) running: Arc<AtomicBool>,
    pub(crate) status: Arc<Status>,
    pub(crate) latest: Arc<program::Latest>,
}

impl Handle {
    /// Trips the switch with reason `api`. No call re-arms.
    pub fn trip(&self) {
        self.switch.trip(Reason::Api);
    }

    /// A person's wake (what `nao-rs wake` sends): every start is limp,
    /// and after a trip the robot stays limp until a wake in the armed
    /// epoch after the re-arm. Reads the page's wake generation now and
    /// hands it to the cycle; while the switch is tripped (or the page
    /// lost) there is none, and the wake is refused. The wake still
    /// counts only if the page is armed in that generation when the cycle
    /// reads it. For a person's action only (a button in the program's
    /// user interface), never for a controller's own decision.
    ///
    /// # Errors
    ///
    /// [`WakeRefused`] while the switch is tripped (or the page lost).
    pub fn wake(&self) -> Result<u64, WakeRefused> {
        let s = self.switch.peek();
        match s.wake_generation() {
            Some(g) => {
                self.wake.wake(g);
                Ok(g)
            }
            None => Err(WakeRefused { reason: s.reason }),
        }
    }

    /// The wake signal the wake socket sets ([`wake::WakeListener`]).
    pub fn wake_signal(&self) -> &Arc<wake::WakeSignal> {
        &self.wake
    }

    /// Asks the runtime to stop: it trips `shutdown`, sends one more all-off
    /// frame and closes the board. Safe from a signal-handling thread.
    pub fn request_stop(&self) {
        // Release: pairs with the Acquire in the cycle loop.
        self.stop.store(true, Ordering::Release);
    }

    /// True until the cycle has ended.
    pub fn is_running(&self) -> bool {
        // Acquire: pairs with the Release at the cycle's end.
        self.running.load(Ordering::Acquire)
    }

    /// A person's jog step for bring-up (`nao-rs bringup`): taken by the
    /// next cycle; ignored outside bring-up.
    pub fn jog(&self, jog: Jog) {
        self.jog.set(jog);
    }

    /// The switch as the page says now (every field, without the integrity
    /// check: that is the cycle's, once a cycle).
    pub fn switch(&self) -> SwitchState {
        let s = self.switch.peek();
        SwitchState {
            tripped: !s.armed,
            reason: s.reason,
            page_lost: s.reason == Some(Reason::PageLost),
            // Relaxed: display-only status.
            limp: !s.armed || self.status.limp.load(Ordering::Relaxed) != 0,
        }
    }

    /// The status the cycle publishes.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The last cycle's sensors and state (a copy).
    pub fn latest_sensors(&self) -> SensorFrame {
        self.latest.read()
    }

    /// The death switch.
    pub(crate) fn death_switch(&self) -> &Arc<dyn Switch> {
        &self.switch
    }
}

/// The newest jog step, for the next cycle (no lock, no allocation).
#[derive(Debug, Default)]
pub(crate) struct JogSignal(AtomicU8);

impl JogSignal {
    fn set(&self, jog: Jog) {
        let code = match jog {
            Jog::Plus => 1,
            Jog::Minus => 2,
        };
        // Release: pairs with the AcqRel swap in `take`.
        self.0.store(code, Ordering::Release);
    }

    /// The jog set since the last take, if any.
    pub(crate) fn take(&self) -> Option<Jog> {
        // AcqRel: pairs with the Release store in `set`.
        match self.0.swap(0, Ordering::AcqRel) {
            1 => Some(Jog::Plus),
            2 => Some(Jog::Minus),
            _ => None,
        }
    }
}
