//! The cycle actor: every 12 ms on absolute deadlines, one [`Step`] (the
//! switch read once, the gate, the protocol core's cycle, the heartbeat,
//! the answer's trips), then what the runtime adds around it without
//! touching the frame: the log, the safety flags, the program's sensors and
//! the status. The rules are all in the step; this only moves data.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deathswitch::stop::udp::UdpShared;
use deathswitch::{Reason, Switch};
use nao_kit::log::{EventSink, Level};
use nao_kit::ticker::{Tick, Ticker};
use nao_wire::link::Link;
use nao_wire::protocol::cycle::{ExchangeFailure, Reconnect};
use nao_wire::protocol::gate::Change;
use nao_wire::step::{Step, StepInput, StepOutput};
use nao_wire::Command;

use crate::flags::{self, SafetyFlags};
use crate::handle::Handle;
use crate::program::{self, SensorFrame, SwitchState};
use crate::runtime::{CycleHook, RunSummary};

/// What the cycle actor is made of.
pub(crate) struct CycleParts {
    pub(crate) step: Step,
    pub(crate) switch: Arc<dyn Switch>,
    pub(crate) commands: rtrb::Consumer<Command>,
    pub(crate) latest: Arc<program::Latest>,
    pub(crate) handle: Handle,
    pub(crate) udp: Option<Arc<UdpShared>>,
    /// Set by the non-real-time side while the guard named in the page is
    /// not alive.
    pub(crate) guard_dead: Arc<AtomicBool>,
    pub(crate) events: EventSink,
    pub(crate) max_cycles: Option<u64>,
    /// Bring-up: the controllers' commands are not the frame's.
    pub(crate) bringup: bool,
    #[cfg(feature = "fault-injection")]
    pub(crate) fault: Option<crate::fault::Fault>,
}

/// The cycle actor's state.
pub(crate) struct CycleActor {
    step: Step,
    switch: Arc<dyn Switch>,
    commands: rtrb::Consumer<Command>,
    latest: Arc<program::Latest>,
    handle: Handle,
    udp: Option<Arc<UdpShared>>,
    guard_dead: Arc<AtomicBool>,
    events: EventSink,
    flags: flags::FlagObserver,
    /// The safety flags published with the next heartbeat.
    safety_flags: u32,
    /// The last read found the page lost (for the log).
    page_lost: bool,
    start_ns: u64,
    max_cycles: Option<u64>,
    bringup: bool,
    frame: SensorFrame,
    #[cfg(feature = "fault-injection")]
    fault: Option<crate::fault::Fault>,
}

impl CycleActor {
    pub(crate) fn new(p: CycleParts) -> CycleActor {
        #[cfg(feature = "fault-injection")]
        let switch = crate::fault::switch(p.switch, p.fault);
        #[cfg(not(feature = "fault-injection"))]
        let switch = p.switch;
        CycleActor {
            step: p.step,
            switch,
            commands: p.commands,
            latest: p.latest,
            handle: p.handle,
            udp: p.udp,
            guard_dead: p.guard_dead,
            events: p.events,
            flags: flags::FlagObserver::new(),
            safety_flags: 0,
            page_lost: false,
            start_ns: 0,
            max_cycles: p.max_cycles,
            bringup: p.bringup,
            frame: SensorFrame::default(),
            #[cfg(feature = "fault-injection")]
            fault: p.fault,
        }
    }

    pub(crate) fn run<L: Link, H: CycleHook<L>>(
        &mut self,
        link: &mut L,
        hook: &mut H,
        period_ns: u64,
    ) -> RunSummary {
        // The switch's clock: the step's time, so the heartbeat's, is the
        // clock the switch's readers judge it with.
        let mut ticker = Ticker::with_clock(self.switch.clone(), period_ns);
        self.start_ns = ticker.schedule().next_deadline_ns();
        let mut panicked = false;
        // The stop seen: this many all-off frames are still to go.
        let mut last_frames: Option<u64> = None;
        let allocations_at_start = nao_kit::alloc::thread_allocations();
        loop {
            // `max_cycles`: the last two cycles (or as many as there are)
            // are all-off, and no cycle runs beyond it.
            if let (None, Some(max)) = (last_frames, self.max_cycles) {
                let left = max.saturating_sub(ticker.schedule().stats().cycles);
                if left <= 2 {
                    self.switch.trip(Reason::Shutdown);
                    last_frames = Some(left);
                }
            }
            if last_frames == Some(0) {
                break;
            }
            let tick = ticker.wait();
            // Acquire: pairs with the Release in Handle::request_stop.
            if last_frames.is_none() && self.handle.stop.load(Ordering::Acquire) {
                // Trip before the last cycle ends; this frame and one more are all-off.
                self.switch.trip(Reason::Shutdown);
                last_frames = Some(2);
            }
            #[cfg(feature = "fault-injection")]
            crate::fault::crash_if_asked(self.fault);
            let step =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.one_cycle(link, hook, &tick)));
            // Relaxed: display-only status.
            self.handle.status.cycle_allocations.store(
                nao_kit::alloc::thread_allocations() - allocations_at_start,
                Ordering::Relaxed,
            );
            if step.is_err() {
                panicked = true;
                self.switch.trip(Reason::Fault);
                // One all-off frame from a fresh cycle state is not possible
                // safely here (the state may be torn); the guard takes over
                // from the missing heartbeat.
                break;
            }
            if let Some(n) = last_frames.as_mut() {
                *n -= 1;
                if *n == 0 {
                    break;
                }
            }
        }
        hook.close(link);
        let s = ticker.schedule().stats();
        // Release: pairs with the Acquire in Handle::is_running.
        self.handle.running.store(false, Ordering::Release);
        self.latest.publish(&self.frame);
        RunSummary {
            cycles: s.cycles,
            max_lateness_ns: s.max_lateness_ns,
            late: s.late,
            overruns: s.overruns,
            panicked,
        }
    }

    /// One cycle: the step (read, gate, frame, exchange, heartbeat, trips),
    /// then the log, the flags and the sensors. Allocates nothing (with a
    /// non-allocating link).
    fn one_cycle<L: Link, H: CycleHook<L>>(
        &mut self,
        link: &mut L,
        hook: &mut H,
        tick: &Tick,
    ) -> StepOutput {
        // A person's wake, taken before the page is read: it counts only
        // if the page is armed in its generation at this read, after it.
        let wake = self.handle.wake.take();
        let jog = self.handle.jog.take();
        let mut command = None;
        while let Ok(c) = self.commands.pop() {
            command = Some(c);
        }
        if self.bringup {
            // During bring-up only the bring-up terminal commands the joint.
            command = None;
        }
        // The step's one time: the tick's start, the one clock read of
        // this cycle (the ticker's, after its sleep).
        let input = StepInput {
            command: command.as_ref(),
            wake,
            jog,
            now_ns: tick.start_ns,
            safety_flags: self.safety_flags,
        };
        let out = self.step.run(&*self.switch, link, &input, |l, seen| {
            hook.before_cycle(l, seen)
        });
        let k = out.cycle.k as i64;
        let lost = out.verdict.reason == Some(Reason::PageLost);
        if lost && !self.page_lost {
            self.events
                .emit(Level::Error, "death switch page lost: all-off", k);
        }
        self.page_lost = lost;
        self.log_change(out.verdict.change, k);
        if let Some(f) = out.cycle.failure {
            let what = match f {
                ExchangeFailure::Read(_) => "USB read failed",
                ExchangeFailure::Answer(_) => "invalid answer",
                ExchangeFailure::Write(_) => "USB write failed",
            };
            self.events.emit(Level::Warning, what, k);
        }
        match out.cycle.reconnect {
            Reconnect::Done => self
                .events
                .emit(Level::Warning, "reconnected the chest board", k),
            Reconnect::Failed => self.events.emit(Level::Error, "reconnect failed", k),
            Reconnect::None => {}
        }
        // Relaxed: a status flag of the listener.
        let udp_not_owned = self
            .udp
            .as_ref()
            .is_some_and(|u| u.not_owned.load(Ordering::Relaxed));
        let mut outside = SafetyFlags::empty();
        outside.set(SafetyFlags::UDP_PORT_NOT_OWNED, udp_not_owned);
        // Relaxed: a status flag of the non-real-time side.
        outside.set(
            SafetyFlags::GUARD_DEAD,
            self.guard_dead.load(Ordering::Relaxed),
        );
        let (f, changed) = self.flags.observe(&out.cycle, outside);
        self.safety_flags = f.bits();
        for bit in changed.iter() {
            self.events
                .emit(Level::Warning, flags::text(bit), i64::from(f.contains(bit)));
        }
        self.publish(&out, tick, f);
        out
    }

    fn log_change(&mut self, change: Change, k: i64) {
        let (level, what) = match change {
            Change::Unchanged => return,
            Change::Tripped => (
                Level::Warning,
                "trip seen: every stiffness 0 until re-armed and woken (cycle)",
            ),
            Change::Rearmed => (
                Level::Info,
                "re-armed: still limp until `nao-rs wake` (cycle)",
            ),
            Change::Woken => (Level::Info, "woken: commands pass again (cycle)"),
            Change::WakeWhileTripped => (
                Level::Warning,
                "wake ignored: the switch is tripped; re-arm (`naoctl rearm`), then wake (cycle)",
            ),
            Change::WakeStale => (
                Level::Warning,
                "wake ignored: its generation is not the page's now (formed before the last \
                 re-arm or this runtime's start, for another page, or guessed); wake again (cycle)",
            ),
        };
        self.events.emit(level, what, k);
    }

    fn publish(&mut self, out: &StepOutput, tick: &Tick, f: SafetyFlags) {
        let c = &out.cycle;
        let v = &out.verdict;
        let s = &c.sensors;
        let fr = &mut self.frame;
        fr.cycle = c.k;
        fr.t_ns = tick.start_ns.saturating_sub(self.start_ns);
        fr.position = s.position;
        fr.current_ma = s.current_ma;
        fr.temperature = s.temperature;
        fr.joint_status = s.joint_status;
        fr.stiffness_sent = c.stiffness;
        fr.imu = s.imu;
        fr.battery = s.battery;
        fr.sonar_mm = s.sonar_mm;
        fr.foot_pressure = s.foot_pressure;
        fr.bumpers = s.bumpers;
        fr.chest_button = s.chest_button;
        fr.switch = SwitchState {
            tripped: v.tripped,
            reason: v.reason,
            page_lost: self.page_lost,
            limp: v.limp,
        };
        fr.bringup = v.bringup;
        fr.all_off = c.all_off;
        fr.safety = f;
        fr.lateness_ns = tick.lateness_ns;
        self.latest.publish(fr);
        let st = &self.handle.status;
        // Relaxed: display-only status.
        st.cycles.store(c.k + 1, Ordering::Relaxed);
        st.lateness_ns.store(tick.lateness_ns, Ordering::Relaxed);
        st.max_lateness_ns
            .fetch_max(tick.lateness_ns, Ordering::Relaxed);
        st.overruns.fetch_add(tick.skipped, Ordering::Relaxed);
        st.max_stiffness.store(
            c.stiffness.iter().copied().max().unwrap_or(0) as u32,
            Ordering::Relaxed,
        );
        st.flags.store(f.bits(), Ordering::Relaxed);
        st.tripped.store(u32::from(v.tripped), Ordering::Relaxed);
        st.limp.store(u32::from(v.limp), Ordering::Relaxed);
        st.motion.store(v.motion.code(), Ordering::Relaxed);
    }
}
