//! The world: one thread, a virtual clock and an event queue ordered by
//! (virtual time, sequence number). In it run the runtime's step
//! (`nao_wire::step::Step`) with a controller, the guard's core
//! (`nao_rs_guard::core::GuardCore`, `deathswitch::rules`, the guard's
//! board `nao_rs_guard::board::WireBoard`), the page (`MemorySwitch` on
//! the virtual clock), the virtual robot (`nao_rs_sim::device::Device`),
//! the UDP stop port and the wake as queues, the process life cycle as
//! systemd and the kernel do it, and a person acting from a
//! [`Schedule`]. The invariants ([`crate::invariants`]) are checked after
//! every event; the first broken one ends the run.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};

use deathswitch::rules::{decide, Settings};
use deathswitch::{MemorySwitch, Reason, Snapshot, Switch};
use nao_kit::clock::{Clock, VirtualClock};
use nao_kit::ticker::Schedule as Frames;
use nao_rs_guard::board::{Board, WireBoard};
use nao_rs_guard::core::{
    exit_state, identity_verified, kill_route, started_after, Candidate, ExitState, GuardCore,
    KillRoute, Observation, Transition,
};
use nao_rs_sim::body::Posture;
use nao_rs_sim::ctl::CtlCommand;
use nao_rs_sim::device::{Conn, Device, FrameSeen};
use nao_rs_sim::settings::BoardSettings;
use nao_wire::link::{Call, Link, LinkError};
use nao_wire::protocol::bringup::{BringUp, BringUpLimits, Jog, Limit, Missing};
use nao_wire::protocol::gate::{Change, WakeLatch};
use nao_wire::protocol::handshake::DEFAULT_ACCEPTED;
use nao_wire::protocol::startup::{Identity, Startup};
use nao_wire::step::{Step, StepInput};
use nao_wire::{Command, Joint, JOINTS};

use crate::invariants::{self as inv, Inv, Owed, GUARD_SLACK_NS};
use crate::schedule::{Action, DamageKind, Rng, Schedule, Timed, WakeVia, MS};

/// The runtime's cycle (`deathswitch::rules::FRAME_PERIOD_NS`).
pub const FRAME_NS: u64 = deathswitch::rules::FRAME_PERIOD_NS;
/// The guard's poll period.
pub const POLL_NS: u64 = nao_rs_guard::poller::POLL_PERIOD_NS;
/// systemd's `RestartSec=1` after a failure.
pub const RESTART_NS: u64 = 1_000 * MS;
/// From exec to the registration in the page.
pub const REGISTER_NS: u64 = 2 * MS;
/// The chest board's start-up once the board is free (link up, the
/// preference block, the boot ids) until the first cycle.
pub const STARTUP_NS: u64 = 120 * MS;
/// The guard's pid (systemd starts it first).
pub const GUARD_PID: u32 = 400;
/// A clock tick (`/proc/PID/stat` start times), ns.
const TICK_NS: u64 = 10 * MS;
/// The guard's rules' times.
const SETTINGS: Settings = Settings {
    beat_timeout_ns: 60 * MS,
    confirmation_window_ns: 40 * MS,
};

/// The shared chest board: the virtual robot's device at the world's time.
struct Bus {
    device: Device,
    now_ns: u64,
}

/// One process's USB handle on the shared device.
struct WorldLink {
    bus: Arc<Mutex<Bus>>,
    conn: Conn,
    read: Vec<u8>,
    last_frame: Option<FrameSeen>,
}

impl WorldLink {
    fn new(bus: &Arc<Mutex<Bus>>, id: u64, pid: u32) -> WorldLink {
        WorldLink {
            bus: bus.clone(),
            conn: Conn::new(id, pid as i32),
            read: Vec::with_capacity(4096),
            last_frame: None,
        }
    }

    /// The process died or closed: the kernel releases its claim.
    fn gone(&mut self) {
        let mut bus = self.bus.lock().unwrap_or_else(|e| e.into_inner());
        bus.device.disconnected(&mut self.conn);
    }
}

impl Link for WorldLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        let mut bus = self.bus.lock().unwrap_or_else(|e| e.into_inner());
        let now = bus.now_ns;
        let (reply, outcome) = bus.device.call(&mut self.conn, &call, now, &mut self.read);
        if outcome.frame.is_some() {
            self.last_frame = outcome.frame;
        }
        let n = reply.map_err(|(e, _)| e)?;
        let to = answer.get_mut(..self.read.len()).ok_or(LinkError::Other)?;
        to.copy_from_slice(&self.read);
        Ok(n)
    }
}

/// Where a runtime process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Started, not registered yet.
    Exec,
    /// Registered; opening the chest board (busy: retried every 50 ms,
    /// given up after 5 s) since this time.
    Opening(u64),
    /// Its cycle runs.
    Running,
    /// Exited (any cause).
    Dead,
}

/// One runtime process.
struct Runtime {
    pid: u32,
    start: u64,
    registered_ns: u64,
    phase: Phase,
    hung: bool,
    stalled_until: u64,
    step: Option<Step>,
    start_read: Snapshot,
    link: WorldLink,
    /// The newest wake not taken: (generation, when its sender read the page).
    wake: Option<(u64, u64)>,
    /// When the senders of the wakes this runtime took read the page.
    wakes_taken: Vec<u64>,
    jog: Option<Jog>,
    /// Bring-up's last missing precondition (for the story).
    bringup_missing: Option<Option<Missing>>,
    beaten: bool,
    /// The guard has seen a beat of this runtime in the page.
    guard_saw_beat: bool,
    last_beat_ns: u64,
    next_cycle_ns: u64,
}

impl Runtime {
    fn live(&self, now: u64) -> bool {
        self.phase != Phase::Dead && now >= self.stalled_until
    }
    /// Its UDP stop listener reads the port (started right after the
    /// registration, before the board's start-up).
    fn reads_port(&self, now: u64) -> bool {
        let started = match self.phase {
            Phase::Exec | Phase::Dead => false,
            Phase::Opening(_) => !mutated(Mutation::UdpAfterStartUp),
            Phase::Running => true,
        };
        started && self.live(now)
    }
}

/// A process the kernel knows.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: u32,
    start: u64,
    alive: bool,
    /// Index of its runtime, or None: another local program.
    runtime: Option<usize>,
}

/// The guard process: its core and the shell around it, as
/// `nao_rs_guard::poller::Poller` does it, with the kernel's answers from
/// the world's process table.
struct Guard {
    core: GuardCore,
    board: WireBoard<WorldLink>,
    frames: Option<Frames>,
    /// The held runtime's verified identity (its pidfd).
    held: Option<(u32, u64)>,
    took_over_ticks: Option<u64>,
    guard_cycle: u64,
    published_holding: Option<bool>,
    /// Its last attempt to open the board found another holder.
    board_busy: bool,
    stalled_until: u64,
    /// Its last poll (virtual ns).
    last_poll_ns: u64,
}

#[cfg(feature = "mutations")]
pub use nao_kit::mutation::Mutation;

/// Without the `mutations` feature there are none.
#[cfg(not(feature = "mutations"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The runtime's UDP listener after the start-up.
    UdpAfterStartUp,
}

#[cfg(feature = "mutations")]
fn mutated(m: Mutation) -> bool {
    nao_kit::mutation::on(m)
}
#[cfg(not(feature = "mutations"))]
fn mutated(_: Mutation) -> bool {
    false
}

/// What the world runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// The schedule's action with this index.
    Act(usize),
    /// systemd starts the runtime.
    Exec,
    Register(usize),
    Open(usize),
    Cycle(usize),
    GuardPoll,
    /// A UDP stop reaches the port.
    UdpArrive,
    /// A wake reaches the runtime: (generation, when its sender read).
    WakeArrive(u64, u64),
    /// Something ends (a stall, a press): the world looks again.
    Wakeup,
    ReleaseBumper,
    End,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        // A max-heap: the earliest (time, sequence) first.
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub inv: Inv,
    /// When, virtual ns.
    pub at_ns: u64,
    /// What broke, in words.
    pub what: String,
}

/// What one run gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The first broken invariant, if any.
    pub violation: Option<Violation>,
    /// The hash of the event log (every event's time, kind and facts).
    pub log_hash: u64,
    /// Events run.
    pub events: u64,
    /// Virtual ns simulated.
    pub simulated_ns: u64,
    /// The story (with [`World::with_story`]): one line per notable event.
    pub story: Vec<String>,
    /// Stiff frames the chest board received from a runtime (the explorer
    /// reaches what it is for: a robot that moves).
    pub stiff_frames: u64,
    /// Frames the guard sent (it took over).
    pub guard_frames: u64,
    /// Every frame the chest board received, in order (with
    /// [`World::with_story`] only: the explorer keeps none).
    pub frames: Vec<FrameNote>,
    /// The page at the end.
    pub page: Snapshot,
}

/// One frame the chest board received (a world case judges them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameNote {
    /// When (virtual ns).
    pub at_ns: u64,
    /// Who sent it: a runtime's pid, or [`GUARD_PID`].
    pub pid: u32,
    /// Some joint had stiffness on the wire.
    pub stiff: bool,
}

/// The whole robot in virtual time.
pub struct World {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Entry>,
    schedule: Schedule,
    rng: Rng,
    /// The world's clock: the page's, moved to each event's time.
    clock: VirtualClock,
    page: MemorySwitch<VirtualClock>,
    bus: Arc<Mutex<Bus>>,
    procs: Vec<Proc>,
    runtimes: Vec<Runtime>,
    current: Option<usize>,
    last_runtime_pid: Option<u32>,
    next_pid: u32,
    next_conn: u64,
    guard: Guard,
    command: Command,
    bringup: Option<usize>,
    udp_queue: u32,
    udp_unread_since: Option<u64>,
    owed: Vec<Owed>,
    last_rearm_ns: u64,
    seen_trip_count: u64,
    seen_armed: bool,
    guard_saw_beat: bool,
    /// When the guard found the page's heartbeat lost (until it sees one).
    guard_lost_at: Option<u64>,
    hash: u64,
    events: u64,
    stiff_frames: u64,
    guard_frames: u64,
    frames: Vec<FrameNote>,
    story: Option<Vec<String>>,
    violation: Option<Violation>,
}

impl World {
    /// A world for `schedule`: the page re-armed at 0, the guard started,
    /// the runtime started by systemd 1 ms later.
    pub fn new(schedule: Schedule) -> World {
        let (cfg, prefs, _) = BoardSettings::default()
            .build()
            .unwrap_or_else(|e| panic!("the virtual robot's default settings: {e}"));
        let mut device = Device::new(cfg, prefs);
        if schedule.bringup.is_some() {
            device.control(CtlCommand::Posture(Posture::LyingBack), 0);
        }
        let bus = Arc::new(Mutex::new(Bus { device, now_ns: 0 }));
        let mut rng = Rng::new(schedule.seed ^ 0x5eed);
        let clock = VirtualClock::new(0);
        let page = MemorySwitch::with_clock(clock.clone());
        page.rearm_with(rng.next_u64());
        let guard = Guard {
            core: GuardCore::new(GUARD_PID),
            board: WireBoard::new(WorldLink::new(&bus, 1, GUARD_PID)),
            frames: None,
            held: None,
            took_over_ticks: None,
            guard_cycle: 0,
            published_holding: None,
            board_busy: false,
            stalled_until: 0,
            last_poll_ns: 0,
        };
        let command = Command {
            stiffness: [0.5; JOINTS],
            ..Command::default()
        };
        let bringup = schedule.bringup;
        let armed = page.snapshot();
        let mut w = World {
            now: 0,
            seq: 0,
            queue: BinaryHeap::with_capacity(64),
            rng,
            clock,
            page,
            bus,
            procs: Vec::new(),
            runtimes: Vec::new(),
            current: None,
            last_runtime_pid: None,
            next_pid: 1000,
            next_conn: 2,
            guard,
            command,
            bringup,
            udp_queue: 0,
            udp_unread_since: None,
            owed: Vec::new(),
            last_rearm_ns: 0,
            seen_trip_count: armed.trip_count,
            seen_armed: armed.armed,
            guard_saw_beat: false,
            guard_lost_at: None,
            hash: 0xcbf2_9ce4_8422_2325,
            events: 0,
            stiff_frames: 0,
            guard_frames: 0,
            frames: Vec::new(),
            story: None,
            violation: None,
            schedule,
        };
        for (i, a) in w.schedule.actions.clone().iter().enumerate() {
            w.at(a.at_ns, Ev::Act(i));
        }
        w.at(0, Ev::GuardPoll);
        w.at(MS, Ev::Exec);
        let end = w.schedule.run_ns;
        w.at(end, Ev::End);
        w
    }

    /// Keeps a story: one line per notable event.
    pub fn with_story(mut self) -> World {
        self.story = Some(Vec::new());
        self
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Entry {
            t: t.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    fn note(&mut self, tag: u64, x: u64) {
        for v in [self.now, tag, x] {
            self.hash = (self.hash ^ v).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn tell(&mut self, line: impl FnOnce() -> String) {
        if let Some(s) = self.story.as_mut() {
            s.push(format!("{:>9.3} s  {}", self.now as f64 / 1e9, line()));
        }
    }

    fn keep_frame(&mut self, pid: u32, stiff: bool) {
        if self.story.is_some() {
            self.frames.push(FrameNote {
                at_ns: self.now,
                pid,
                stiff,
            });
        }
    }

    fn fail(&mut self, inv: Inv, r: Result<(), String>) {
        if let (Err(what), None) = (r, &self.violation) {
            let at_ns = self.now;
            self.tell(|| format!("BROKEN {inv}: {what}"));
            self.violation = Some(Violation { inv, at_ns, what });
        }
    }

    /// Runs to the end of the schedule or the first broken invariant.
    pub fn run(mut self) -> Outcome {
        while let Some(e) = self.queue.pop() {
            self.now = e.t;
            if self.clock.now_ns() != self.now {
                self.clock.advance_to_ns(self.now);
            }
            self.bus.lock().unwrap_or_else(|e| e.into_inner()).now_ns = self.now;
            self.events += 1;
            if e.ev == Ev::End {
                break;
            }
            self.event(e.ev);
            self.after_event();
            if self.violation.is_some() {
                break;
            }
        }
        Outcome {
            violation: self.violation,
            log_hash: self.hash,
            events: self.events,
            simulated_ns: self.now,
            story: self.story.unwrap_or_default(),
            stiff_frames: self.stiff_frames,
            guard_frames: self.guard_frames,
            frames: self.frames,
            page: self.page.snapshot(),
        }
    }

    fn ticks(&self) -> u64 {
        100 + self.now / TICK_NS
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Act(i) => {
                let a = self.schedule.actions[i];
                self.note(1, i as u64);
                self.tell(|| a.action.to_string());
                self.act(a);
            }
            Ev::Exec => self.exec(),
            Ev::Register(r) => self.register(r),
            Ev::Open(r) => self.open(r),
            Ev::Cycle(r) => self.cycle(r),
            Ev::GuardPoll => {
                if self.now < self.guard.stalled_until {
                    let t = self.guard.stalled_until;
                    self.at(t, Ev::GuardPoll);
                } else {
                    self.guard_poll();
                    self.at(self.now + POLL_NS, Ev::GuardPoll);
                }
            }
            Ev::UdpArrive => {
                self.note(2, 0);
                self.tell(|| "a UDP stop reaches the port".into());
                self.udp_queue += 1;
            }
            Ev::WakeArrive(g, read) => self.wake_arrives(g, read),
            Ev::Wakeup => {}
            Ev::ReleaseBumper => {
                self.robot(CtlCommand::Bumper([0, 0]));
            }
            Ev::End => {}
        }
    }

    fn robot(&mut self, c: CtlCommand) {
        let now = self.now;
        let mut bus = self.bus.lock().unwrap_or_else(|e| e.into_inner());
        bus.device.control(c, now);
    }

    fn act(&mut self, a: Timed) {
        let rt = self.current;
        match a.action {
            Action::NaoctlStop => {
                self.page.trip(Reason::Naoctl);
            }
            Action::Rearm => {
                let was_tripped = !self.page.snapshot().armed;
                let n = self.rng.next_u64();
                self.page.rearm_with(n);
                if was_tripped {
                    self.last_rearm_ns = self.now;
                }
            }
            Action::Wake {
                via,
                delay_ns,
                lost,
            } => {
                // `nao-rs wake` (or the app) reads the generation now.
                match self.page.snapshot().wake_generation() {
                    None => self.tell(|| "  the wake is refused: no generation (tripped)".into()),
                    Some(g) if !lost => {
                        let d = match via {
                            WakeVia::Local => delay_ns.min(MS),
                            WakeVia::Network => delay_ns,
                        };
                        let read = self.now;
                        self.at(self.now + d, Ev::WakeArrive(g, read));
                    }
                    Some(_) => {}
                }
            }
            Action::UdpStop { delay_ns, lost } => {
                if !lost {
                    self.at(self.now + delay_ns, Ev::UdpArrive);
                }
            }
            Action::Crash | Action::Exit => {
                if let Some(r) = rt {
                    self.runtime_dies(r, "crashed");
                }
            }
            Action::Hang => {
                if let Some(r) = rt.filter(|&r| self.runtimes[r].phase != Phase::Dead) {
                    if !self.runtimes[r].hung {
                        self.runtimes[r].hung = true;
                        self.owe_beat(r, "the runtime hung");
                    }
                }
            }
            Action::Stall { len_ns } => {
                if let Some(r) = rt.filter(|&r| self.runtimes[r].phase != Phase::Dead) {
                    let until = self.now + len_ns;
                    let rt = &mut self.runtimes[r];
                    rt.stalled_until = rt.stalled_until.max(until);
                    if len_ns > SETTINGS.beat_timeout_ns {
                        self.owe_beat(r, "the runtime stalled");
                    }
                    self.at(until, Ev::Wakeup);
                }
            }
            Action::GuardStall { len_ns } => {
                let until = (self.now + len_ns).max(self.guard.stalled_until);
                self.guard.stalled_until = until;
                let seen = self.guard.last_poll_ns;
                for o in &mut self.owed {
                    o.due_ns = o.due_ns.max(until + GUARD_SLACK_NS);
                    // A trip the guard has not seen yet: rule 3's window
                    // counts from when it first sees it (`Judge`).
                    if o.why == "a trip not confirmed" && o.since_ns > seen {
                        o.due_ns = o
                            .due_ns
                            .max(until + SETTINGS.confirmation_window_ns + GUARD_SLACK_NS);
                    }
                }
                self.at(until, Ev::Wakeup);
            }
            Action::PidReuse => {
                if let Some(pid) = self.last_runtime_pid {
                    if !self.procs.iter().any(|p| p.alive && p.pid == pid) {
                        let start = self.ticks();
                        self.procs.push(Proc {
                            pid,
                            start,
                            alive: true,
                            runtime: None,
                        });
                        self.tell(|| format!("  pid {pid} is another program's now"));
                    }
                }
            }
            Action::ForgePid => {
                let pid = self.next_pid;
                self.next_pid += 1;
                let start = self.ticks();
                self.procs.push(Proc {
                    pid,
                    start,
                    alive: true,
                    runtime: None,
                });
                self.page.forge_driver(pid, start);
            }
            Action::Damage(kind) => {
                // Each kind reads lost and is repaired by the next check.
                let _ = kind == DamageKind::Replace;
                self.page.damage();
            }
            Action::Button { len_ns } => {
                self.robot(CtlCommand::Button(Some(len_ns / MS)));
            }
            Action::BumperHold { len_ns } => {
                self.robot(CtlCommand::Bumper([3, 3]));
                self.at(self.now + len_ns, Ev::ReleaseBumper);
            }
            Action::Jog { plus } => {
                if let Some(r) = rt {
                    self.runtimes[r].jog = Some(if plus { Jog::Plus } else { Jog::Minus });
                }
            }
            Action::DropAnswers { n } => self.robot(CtlCommand::Drop(n)),
        }
    }

    /// The guard found the page's heartbeat lost (damage, a forged pid):
    /// it counts the beat timeout from then (`rules::Judge`), so an owed
    /// take-over for a silent runtime may come that much later.
    fn heartbeat_lost(&mut self) {
        let due = self.now + SETTINGS.beat_timeout_ns + GUARD_SLACK_NS;
        for o in &mut self.owed {
            if o.why != "the runtime exited" {
                o.due_ns = o.due_ns.max(due);
            }
        }
    }

    /// A runtime that has beaten stops beating: the guard owes a take-over
    /// by its last beat plus the beat timeout.
    fn owe_beat(&mut self, r: usize, why: &'static str) {
        let rt = &self.runtimes[r];
        if rt.phase != Phase::Running || !rt.beaten || self.guard.core.holding() {
            return;
        }
        let since = rt.last_beat_ns.max(self.guard_lost_at.unwrap_or(0));
        let due = self.unseen(r, since + SETTINGS.beat_timeout_ns + GUARD_SLACK_NS);
        self.owe(r, since, due, why);
    }

    /// `due`, or later when the guard has not seen runtime `r` beat (it
    /// was stalled through its beats, and the page lost them since): to
    /// the guard it is still starting, under its first-beat bound (start-up
    /// or hand-over) from when it saw the registration or handed the board
    /// over (or will, at its next poll).
    fn unseen(&self, r: usize, due: u64) -> u64 {
        let rt = &self.runtimes[r];
        if rt.guard_saw_beat {
            return due;
        }
        let (since, bound) = match self.guard.core.awaiting() {
            Some((pid, kind, since)) if pid == rt.pid => (since, kind.bound_ns()),
            _ => (
                self.now.max(self.guard.stalled_until) + POLL_NS,
                deathswitch::rules::START_UP_BOUND_NS,
            ),
        };
        due.max(since + bound + GUARD_SLACK_NS)
    }

    fn owe(&mut self, runtime: usize, since_ns: u64, due_ns: u64, why: &'static str) {
        let due_ns = due_ns.max(self.guard.stalled_until + GUARD_SLACK_NS);
        self.owed.push(Owed {
            since_ns,
            due_ns,
            why,
            runtime,
        });
    }

    fn exec(&mut self) {
        let pid = self.next_pid;
        self.next_pid += 1;
        let conn = self.next_conn;
        self.next_conn += 1;
        let start = self.ticks();
        let r = self.runtimes.len();
        self.runtimes.push(Runtime {
            pid,
            start,
            registered_ns: self.now,
            phase: Phase::Exec,
            hung: false,
            stalled_until: 0,
            step: None,
            start_read: Snapshot::default(),
            link: WorldLink::new(&self.bus, conn, pid),
            wake: None,
            wakes_taken: Vec::new(),
            jog: None,
            bringup_missing: None,
            beaten: false,
            guard_saw_beat: false,
            last_beat_ns: 0,
            next_cycle_ns: 0,
        });
        self.procs.push(Proc {
            pid,
            start,
            alive: true,
            runtime: Some(r),
        });
        self.current = Some(r);
        self.last_runtime_pid = Some(pid);
        self.note(3, u64::from(pid));
        self.tell(|| format!("systemd starts the runtime (pid {pid})"));
        self.at(self.now + REGISTER_NS, Ev::Register(r));
    }

    fn register(&mut self, r: usize) {
        if self.runtimes[r].phase != Phase::Exec {
            return;
        }
        if self.now < self.runtimes[r].stalled_until {
            let t = self.runtimes[r].stalled_until;
            self.at(t, Ev::Register(r));
            return;
        }
        let nonce = self.rng.next_u64();
        let (pid, start) = (self.runtimes[r].pid, self.runtimes[r].start);
        self.page.register_with(pid, start, nonce);
        // Every start is limp: the gate starts from the switch read now.
        let read = self.page.read();
        let rt = &mut self.runtimes[r];
        rt.registered_ns = self.now;
        rt.start_read = read;
        rt.phase = Phase::Opening(self.now);
        self.note(4, u64::from(pid));
        self.tell(|| format!("the runtime {pid} registers in the page"));
        self.at(self.now, Ev::Open(r));
    }

    fn open(&mut self, r: usize) {
        let Phase::Opening(since) = self.runtimes[r].phase else {
            return;
        };
        let rt = &mut self.runtimes[r];
        if self.now < rt.stalled_until || rt.hung {
            if !rt.hung {
                let t = rt.stalled_until;
                self.at(t, Ev::Open(r));
            }
            return;
        }
        match Startup::run(&mut rt.link) {
            Ok(id) => {
                let step = self.runtime_step(&id, r);
                let rt = &mut self.runtimes[r];
                rt.step = Some(step);
                rt.phase = Phase::Running;
                let pid = rt.pid;
                self.note(5, u64::from(pid));
                self.tell(|| format!("the runtime {pid} has the chest board"));
                // The board is this runtime's now: its start is limp (I1,
                // I2 judge its frames); what an exited one was owed is void.
                let runtimes = &self.runtimes;
                self.owed
                    .retain(|o| runtimes[o.runtime].phase != Phase::Dead);
                let first = self.now + STARTUP_NS;
                self.runtimes[r].next_cycle_ns = first;
                self.at(first, Ev::Cycle(r));
            }
            Err(_) => {
                rt.link.close();
                if self.now.saturating_sub(since) >= deathswitch::rules::RUNTIME_OPEN_TIMEOUT_NS {
                    self.tell(|| "the runtime gives the busy board up and exits".into());
                    self.runtime_dies(r, "gave up");
                } else {
                    self.at(
                        self.now + deathswitch::rules::RUNTIME_OPEN_RETRY_NS,
                        Ev::Open(r),
                    );
                }
            }
        }
    }

    fn runtime_step(&self, id: &Identity, r: usize) -> Step {
        let step = Step::new(
            id,
            &DEFAULT_ACCEPTED,
            &self.runtimes[r].start_read,
            WakeLatch::On,
        );
        match self.bringup {
            Some(j) => step.with_bringup(BringUp::new(Joint::ALL[j], BringUpLimits::default())),
            None => step,
        }
    }

    fn runtime_dies(&mut self, r: usize, how: &'static str) {
        let rt = &mut self.runtimes[r];
        if rt.phase == Phase::Dead {
            return;
        }
        let beaten = rt.beaten && rt.phase == Phase::Running;
        rt.phase = Phase::Dead;
        rt.link.gone();
        let pid = rt.pid;
        for p in &mut self.procs {
            if p.runtime == Some(r) {
                p.alive = false;
            }
        }
        self.note(6, u64::from(pid));
        self.tell(|| format!("the runtime {pid} is gone ({how}); systemd restarts it in 1 s"));
        if beaten && !self.guard.core.holding() {
            self.owe(r, self.now, self.now + GUARD_SLACK_NS, "the runtime exited");
        }
        // Its pidfd turns readable: the guard polls at once.
        self.at(self.now, Ev::GuardPoll);
        self.at(self.now + RESTART_NS, Ev::Exec);
    }

    fn wake_arrives(&mut self, g: u64, read: u64) {
        let Some(r) = self.current else { return };
        if self.runtimes[r].phase == Phase::Dead {
            return;
        }
        self.note(7, read);
        self.tell(|| {
            format!(
                "a wake (read at {:.3} s) reaches the runtime",
                read as f64 / 1e9
            )
        });
        // Of several wakes before the cycle takes one, the newest is kept.
        self.runtimes[r].wake = Some((g, read));
    }

    fn cycle(&mut self, r: usize) {
        let now = self.now;
        let rt = &mut self.runtimes[r];
        if rt.phase != Phase::Running || rt.hung {
            return;
        }
        if now < rt.stalled_until {
            let t = rt.stalled_until;
            self.at(t, Ev::Cycle(r));
            return;
        }
        let wake = rt.wake.take();
        if let Some((_, read)) = wake {
            rt.wakes_taken.push(read);
        }
        let jog = rt.jog.take();
        let input = StepInput {
            command: self.bringup.is_none().then_some(&self.command),
            wake: wake.map(|w| w.0),
            jog,
            now_ns: now / MS * MS,
            safety_flags: 0,
        };
        rt.link.last_frame = None;
        let Some(step) = rt.step.as_mut() else { return };
        let out = step.run(&self.page, &mut rt.link, &input, |_, _| {});
        rt.beaten = true;
        rt.last_beat_ns = now;
        let frame = rt.link.last_frame;
        let (pid, registered, start) = (rt.pid, rt.registered_ns, rt.start);
        // Absolute deadlines; a late cycle skips to the next one ahead.
        let mut next = rt.next_cycle_ns + FRAME_NS;
        if next <= now {
            next = now + FRAME_NS - (now - rt.next_cycle_ns) % FRAME_NS;
        }
        rt.next_cycle_ns = next;
        self.at(next, Ev::Cycle(r));
        self.note(8, u64::from(out.cycle.all_off) | (out.cycle.k << 1));
        match out.verdict.change {
            Change::Woken => self.tell(|| format!("the runtime {pid} is woken: it may move")),
            Change::WakeStale => self.tell(|| format!("the runtime {pid} uses up a stale wake")),
            Change::Tripped => self.tell(|| {
                format!(
                    "the runtime {pid} reads the trip ({}): all-off",
                    out.verdict
                        .reason
                        .map_or("a trip between reads", Reason::name)
                )
            }),
            _ => {}
        }
        let _ = start;
        if let Some(b) = out.verdict.bringup {
            if Some(b.missing) != self.runtimes[r].bringup_missing {
                let m = b.missing;
                self.runtimes[r].bringup_missing = Some(m);
                self.tell(|| match m {
                    Some(m) => format!("bring-up waits: {}", m.name()),
                    None => "bring-up: the joint may move".into(),
                });
            }
        }
        // A trip this very step read (or raised): owed from now.
        self.detect_trips();
        // A frame all-off since the trip confirms it: nothing owed.
        if out.cycle.all_off {
            self.owed
                .retain(|o| o.why != "a trip not confirmed" || now < o.since_ns);
        }
        // A beat again: a stall's owed take-over is void.
        self.owed
            .retain(|o| o.why != "the runtime stalled" || now < o.since_ns);
        self.fail(
            Inv::I1,
            inv::i1_tripped_read_frame_all_off(out.switch.armed, out.cycle.all_off),
        );
        let device_all_off = match frame {
            Some(f) => f.stiffness.all_off(),
            None => true,
        };
        let all_off = out.cycle.all_off && device_all_off;
        self.stiff_frames += u64::from(!all_off);
        if frame.is_some() {
            self.keep_frame(pid, !all_off);
        }
        let wakes = &self.runtimes[r].wakes_taken;
        let r2 = inv::i2_stiff_frame_needs_a_wake_read_after_the_rearm(
            all_off,
            self.last_rearm_ns,
            registered,
            wakes,
        );
        self.fail(Inv::I2, r2);
        if let Some(j) = self.bringup {
            let cap = (BringUpLimits::default().get(Limit::MaxStiffness) * 1000.0).ceil() as u16;
            let stiff = frame.map_or(out.cycle.stiffness, |f| f.state.joints.stiffness);
            self.fail(Inv::I7, inv::i7_bringup_one_joint_under_cap(&stiff, j, cap));
        }
    }

    /// The process the kernel has at `pid` now (the one a SIGKILL by pid
    /// reaches).
    fn proc_at(&self, pid: u32) -> Option<Proc> {
        self.procs
            .iter()
            .rev()
            .find(|p| p.alive && p.pid == pid)
            .copied()
    }

    fn kill(&mut self, p: Proc) {
        self.note(9, u64::from(p.pid));
        let pid = p.pid;
        self.tell(|| format!("the guard sends SIGKILL to pid {pid}"));
        match p.runtime {
            Some(r) => self.runtime_dies(r, "SIGKILL"),
            None => {
                for q in &mut self.procs {
                    if q.pid == p.pid && q.start == p.start {
                        q.alive = false;
                    }
                }
            }
        }
    }

    /// The guard's candidate, as `Poller::candidate` finds it: the page's
    /// driver other than the held runtime, verified by its start time
    /// (the world's process table is the kernel's `/proc`).
    fn candidate(&self, snap: &Snapshot, runtime: ExitState) -> Candidate {
        let held = match runtime {
            ExitState::Alive(p) | ExitState::Exited(p) => Some(p),
            ExitState::Unknown => None,
        };
        let pid = match snap.driver_pid {
            Some(p) if Some(p) != held => p,
            _ => return Candidate::None,
        };
        if matches!(runtime, ExitState::Alive(_)) && !self.guard.core.holding() {
            return Candidate::None;
        }
        if snap.driver_start == 0 && nao_rs_guard::core::kill_target_ok(pid, GUARD_PID) {
            return Candidate::None;
        }
        let found = self.proc_at(pid);
        let start = found.map(|p| p.start);
        if !identity_verified(pid, GUARD_PID, snap.driver_start, start, start) {
            return Candidate::Refused(pid);
        }
        match found.and_then(|p| p.runtime) {
            // Not a runtime (does not map the page): nothing.
            None => Candidate::None,
            Some(_) => Candidate::Verified {
                pid,
                restart: started_after(snap.driver_start, self.guard.took_over_ticks),
            },
        }
    }

    fn guard_poll(&mut self) {
        let now = self.now;
        self.guard.last_poll_ns = now;
        self.page.check_page();
        let snap = self.page.snapshot();
        if self.guard_saw_beat && snap.last_cycle.is_none() {
            self.heartbeat_lost();
            self.guard_lost_at = Some(now);
        }
        self.guard_saw_beat = snap.last_cycle.is_some();
        if self.guard_saw_beat {
            self.guard_lost_at = None;
            if let Some(r) = self.current {
                let rt = &mut self.runtimes[r];
                rt.guard_saw_beat |= rt.beaten && snap.driver_pid == Some(rt.pid);
            }
        }
        let held_alive = self.guard.held.map(|(pid, start)| {
            self.procs
                .iter()
                .any(|p| p.alive && p.pid == pid && p.start == start)
        });
        let runtime = exit_state(self.guard.held.map(|h| h.0), held_alive.map(|a| !a), None);
        let judged = self.guard.core.judged(&snap, runtime, now);
        let verdict = decide(&judged, now, &SETTINGS);
        let candidate = self.candidate(&snap, runtime);
        let obs = Observation {
            armed: snap.armed,
            driver_pid: snap.driver_pid,
            beaten: judged.last_cycle.is_some(),
            verdict,
            runtime,
            candidate,
            now_ns: now,
            board_busy: !self.guard.board.is_open() && self.guard.board_busy,
        };
        let (actions, transition) = self.guard.core.step(&obs);
        if let Some(reason) = actions.trip {
            self.page.trip(reason);
        }
        if actions.forget {
            self.guard.held = None;
        }
        if let Some(pid) = actions.adopt {
            if let Candidate::Verified { pid: v, .. } = candidate {
                if v == pid {
                    self.guard.held = Some((pid, snap.driver_start));
                }
            }
        }
        if let Transition::TakeOver(..) = transition {
            self.guard.board_busy = false;
            self.guard.guard_cycle = judged.last_cycle.unwrap_or(0);
            self.guard.took_over_ticks = Some(self.ticks());
        }
        if let Some(pid) = actions.kill {
            let pidfd = self.guard.held.map(|h| h.0);
            let target = match kill_route(pid, pidfd, pidfd) {
                KillRoute::Pidfd | KillRoute::ByPidIfSame => self.guard.held.and_then(|(p, s)| {
                    self.procs
                        .iter()
                        .find(|q| q.alive && q.pid == p && q.start == s)
                        .copied()
                }),
                #[cfg(feature = "mutations")]
                KillRoute::ByPidUnchecked => self.proc_at(pid),
                KillRoute::Refuse => None,
            };
            if let Some(p) = target {
                let r = inv::i5_signal_only_verified(Some((p.pid, p.start)), self.guard.held);
                self.fail(Inv::I5, r);
                self.kill(p);
            }
        }
        match transition {
            Transition::TakeOver(reason, pid) => {
                self.note(10, name_hash(reason.name()));
                self.tell(|| format!("the guard takes over ({}) from {pid:?}", reason.name()));
            }
            Transition::Succeeded(_, pid) => {
                self.note(15, u64::from(pid));
                self.tell(|| {
                    format!(
                        "the board is busy: the guard hands it over to the runtime {pid}, which registered before the guard saw the exit"
                    )
                });
                let target = self.proc_at(pid).map(|p| (p.pid, p.start));
                let r = inv::i5_signal_only_verified(target, Some((pid, snap.driver_start)));
                self.fail(Inv::I5, r);
            }
            Transition::HandOver(pid) => {
                self.note(11, u64::from(pid));
                self.tell(|| format!("the guard hands the board over to the runtime {pid}"));
                let target = self.proc_at(pid).map(|p| (p.pid, p.start));
                let r = inv::i5_signal_only_verified(target, Some((pid, snap.driver_start)));
                self.fail(Inv::I5, r);
            }
            Transition::Release => {
                self.note(12, 0);
                self.tell(|| "the guard releases the board (re-armed)".into());
            }
            Transition::Refused(pid) => {
                self.note(13, u64::from(pid));
                self.tell(|| format!("the guard refuses pid {pid} (not the runtime)"));
            }
            Transition::Watch => {
                self.note(14, 0);
                self.tell(|| "the guard watches the runtime's beat".into());
            }
            Transition::Unwatch | Transition::None => {}
        }
        if actions.clear_heartbeat {
            self.page.clear_heartbeat();
        }
        if let Some(pid) = actions.clear_driver {
            self.page.clear_driver_if(pid);
        }
        if actions.hold_board {
            if !self.guard.board.is_open() {
                match self.guard.board.open() {
                    Ok(()) => {
                        self.guard.frames = None;
                        self.guard.board_busy = false;
                    }
                    Err(e) => self.guard.board_busy = matches!(e, LinkError::Busy),
                }
            }
            if self.guard.board.is_open() && self.frame_due(now) {
                let sent = self.guard.board.send_all_off(now).is_ok();
                if sent {
                    self.guard_frames += 1;
                    self.keep_frame(GUARD_PID, false);
                    self.guard.guard_cycle += 1;
                    let c = self.guard.guard_cycle;
                    self.page.write_heartbeat(c, now, true);
                    // The guard's all-off: what a hang, crash or disobeyed
                    // trip is owed.
                    self.owed.clear();
                }
            }
        } else if self.guard.board.is_open() {
            self.guard.board.close();
        }
        let holding = self.guard.core.holding();
        if self.guard.published_holding != Some(holding) {
            self.page.set_guard(GUARD_PID, 50, holding);
            self.guard.published_holding = Some(holding);
        }
    }

    fn frame_due(&mut self, now: u64) -> bool {
        let s = self
            .guard
            .frames
            .get_or_insert_with(|| Frames::new(now, FRAME_NS, FRAME_NS / 10));
        if now >= s.plan(now) {
            s.start(now);
            true
        } else {
            false
        }
    }

    /// After every event: the port's queue, the trips, the invariants.
    fn after_event(&mut self) {
        let now = self.now;
        // The UDP stop port: one queue, drained by any live holder.
        if self.udp_queue > 0 {
            let guard_live = now >= self.guard.stalled_until;
            let rt = self.current.map(|r| &self.runtimes[r]);
            let rt_reads = rt.is_some_and(|r| r.reads_port(now));
            let rt_holds = rt.is_some_and(|r| {
                matches!(r.phase, Phase::Opening(_) | Phase::Running) && r.live(now)
            });
            if guard_live || rt_reads {
                self.udp_queue = 0;
                self.udp_unread_since = None;
                self.page.trip(Reason::Udp);
                self.note(15, u64::from(guard_live));
                self.tell(|| {
                    format!(
                        "the stop port is read (by the {})",
                        if rt_reads { "runtime" } else { "guard" }
                    )
                });
            } else if rt_holds {
                self.udp_unread_since.get_or_insert(now);
            } else {
                self.udp_unread_since = None;
            }
        }
        self.detect_trips();
        let r = inv::i3_guard_all_off_in_bound(&self.owed, now);
        self.fail(Inv::I3, r);
        let r = inv::i4_delivered_stop_trips_in_bound(self.udp_unread_since, now);
        self.fail(Inv::I4, r);
        let writers = usize::from(self.guard.board.is_open())
            + self
                .runtimes
                .iter()
                .filter(|r| r.phase == Phase::Running)
                .count();
        self.fail(Inv::I6, inv::i6_one_writer(writers));
    }

    /// Trips and re-arms, from the page itself: a trip while a runtime
    /// beats is owed a confirmation (its all-off frame since) or the
    /// guard's take-over.
    fn detect_trips(&mut self) {
        let now = self.now;
        let s = self.page.snapshot();
        let tripped_now = (self.seen_armed && !s.armed) || s.trip_count != self.seen_trip_count;
        if tripped_now && !s.armed {
            let reason = s.reason;
            self.note(16, u64::from(s.reason_code));
            self.tell(|| format!("the switch trips ({})", reason.map_or("?", Reason::name)));
            let beating = self
                .current
                .filter(|&r| self.runtimes[r].phase == Phase::Running && self.runtimes[r].beaten);
            if let (Some(r), false) = (beating, self.guard.core.holding()) {
                // Rule 3's window counts from the trip time the page shows:
                // a repair's trip while tripped starts it again.
                // Rule 3's window counts from when the guard first sees
                // the trip (`Judge`): at its next poll, after a stall.
                let seen = now.max(self.guard.stalled_until);
                let due = self.unseen(r, seen + SETTINGS.confirmation_window_ns + GUARD_SLACK_NS);
                self.owed.retain(|o| o.why != "a trip not confirmed");
                self.owe(r, now, due, "a trip not confirmed");
            }
        }
        if s.armed && !self.seen_armed {
            // A re-arm: a trip no longer needs confirming.
            self.owed.retain(|o| o.why != "a trip not confirmed");
        }
        self.seen_armed = s.armed;
        self.seen_trip_count = s.trip_count;
    }
}

/// A number for a name (the event log's hash).
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Runs the schedule `seed` picks (with `mutation` selected on this
/// thread, if any).
pub fn run_seed(seed: u64, mutation: Option<Mutation>, story: bool) -> Outcome {
    run_schedule(Schedule::from_seed(seed), mutation, story)
}

/// Runs `schedule` (with `mutation` selected on this thread, if any).
pub fn run_schedule(schedule: Schedule, mutation: Option<Mutation>, story: bool) -> Outcome {
    #[cfg(feature = "mutations")]
    nao_kit::mutation::select(mutation);
    #[cfg(not(feature = "mutations"))]
    let _ = mutation;
    let w = World::new(schedule);
    let out = if story { w.with_story().run() } else { w.run() };
    #[cfg(feature = "mutations")]
    nao_kit::mutation::select(None);
    out
}
