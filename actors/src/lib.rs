//! The runtime a robot program links (as hulk does) and `nao-rs run` hosts.
//!
//! [`Runtime::start`] registers the process in the page (`driver_pid`),
//! brings the chest board up (retrying every 50 ms for up to 5 s while
//! another process holds it), runs the protocol core's start-up and returns
//! the robot's [`Identity`] at once with a [`ProgramIo`]; the motor board
//! handshake goes on in the first cycles.
//!
//! Actors (threads made with [`nao_kit`]):
//! - `nao-rs-cycle` (SCHED_FIFO 30): every 12 ms on absolute deadlines, the
//!   death switch check, the wake latch ([`latch`]: limp after any trip
//!   until a person's wake after the re-arm, below every controller), the
//!   protocol core's cycle (`nao_wire`'s [`Cycle::run`]: safety ramps,
//!   frame, USB exchange, answer), then the heartbeat, the trips from the
//!   answer, the safety status, the sensors;
//! - `nao-rs-udp` (SCHED_FIFO 20): the UDP stop ([`udp`]);
//! - `nao-rs-log` (normal): writes the events the others queue ([`nao_kit::log`]);
//! - `nao-rs-status` (normal): the runtime's non-real-time side: the
//!   status file ([`status_file`], `status.json` next to the page, 10 Hz)
//!   and, once a second, whether the guard named in the page is alive
//!   (flag `guard-dead`).
//!
//! Stopping ([`Handle::request_stop`], a signal in `nao-rs run`, a panic)
//! trips the switch (`shutdown`, or `fault` for a panic) before the last
//! cycle ends, sends one more all-off frame and closes the board.

pub mod controller;
pub mod flags;
pub mod latch;
pub mod lola;
pub mod program;
pub mod socket_file;
pub mod status_file;
pub mod switch;
pub mod udp;
pub mod wake;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use nao_wire::link::{Link, LinkError};
use nao_wire::protocol::cycle::{Cycle, CycleInput, CycleOutput};
use nao_wire::protocol::handshake::DEFAULT_ACCEPTED;
use nao_wire::protocol::startup::{Identity, Startup, StartupError};
use nao_wire::Command;

use nao_kit::log::{EventSink, Level, LogActor, Logbook};
use nao_kit::{monotonic_ns, ActorSpec, Tick, Ticker};

pub use flags::SafetyFlags;
pub use program::{ProgramIo, SensorFrame, SwitchState};
pub use switch::{Blackboard, MemoryBoard, Motion, PageHealth, Reason};
pub use wake::WakeRefused;

/// The runtime's cycle period: 12 ms.
pub const PERIOD_NS: u64 = 12_000_000;
/// The cycle actor's SCHED_FIFO priority.
pub const CYCLE_PRIORITY: u8 = 30;
/// The UDP listener's SCHED_FIFO priority (below the cycle's).
pub const UDP_PRIORITY: u8 = 20;
/// A busy chest board is retried this often.
pub const OPEN_RETRY_NS: u64 = 50_000_000;
/// ... for this long.
pub const OPEN_TIMEOUT_NS: u64 = 5_000_000_000;
/// The status file is rewritten this often (10 Hz).
pub const STATUS_PERIOD_NS: u64 = 100_000_000;
/// The guard named in the page is checked this often.
pub const GUARD_CHECK_PERIOD_NS: u64 = 1_000_000_000;

/// How the runtime runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The cycle period, ns (12 ms).
    pub period_ns: u64,
    /// The cycle actor's SCHED_FIFO priority (30), `None`: normal policy.
    pub cycle_priority: Option<u8>,
    /// The CPU the cycle actor is pinned to, if any.
    pub cycle_cpu: Option<usize>,
    /// The UDP stop port (7701), `None`: no listener.
    pub udp_port: Option<u16>,
    /// The UDP listener's SCHED_FIFO priority (20).
    pub udp_priority: Option<u8>,
    /// The UDP stop's hand-over socket file (`udp::handover_path` of the
    /// page); `None`: next to the default page (`$NAO_RS_DEATHSWITCH`).
    pub udp_handover: Option<std::path::PathBuf>,
    /// The accepted motor board configuration versions (`[10]`).
    pub accepted: Vec<u8>,
    /// Busy-board retry period, ns (50 ms).
    pub open_retry_ns: u64,
    /// Busy-board retry limit, ns (5 s).
    pub open_timeout_ns: u64,
    /// Slots of the command ring (4).
    pub command_capacity: usize,
    /// Stop by itself after exactly this many cycles (`nao-rs record
    /// --cycles`): `shutdown` is tripped before the last two cycles (all of
    /// them when fewer), so their frames are all-off; 0 runs no cycle.
    pub max_cycles: Option<u64>,
    /// Where log lines go (default: stderr).
    pub logger: Option<slog::Logger>,
    /// The status file ([`status_file`]); `None`: `$NAO_RS_STATUS`, else
    /// `status.json` next to the page (none for a switch without a file).
    pub status_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period_ns: PERIOD_NS,
            cycle_priority: Some(CYCLE_PRIORITY),
            cycle_cpu: None,
            udp_port: Some(udp::DEFAULT_PORT),
            udp_priority: Some(UDP_PRIORITY),
            udp_handover: None,
            accepted: DEFAULT_ACCEPTED.to_vec(),
            open_retry_ns: OPEN_RETRY_NS,
            open_timeout_ns: OPEN_TIMEOUT_NS,
            command_capacity: 4,
            max_cycles: None,
            logger: None,
            status_file: None,
        }
    }
}

/// Why the runtime did not start.
#[derive(Debug)]
pub enum StartError {
    /// The chest board stayed busy (held by the guard or another runtime).
    Busy {
        /// How long it was retried, ms.
        waited_ms: u64,
        /// The last error.
        error: StartupError,
    },
    /// The start-up failed (no frame was sent).
    Startup(StartupError),
    /// A thread could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Busy { waited_ms, error } => write!(
                f,
                "the chest board stayed busy for {waited_ms} ms ({error}): another process \
                 holds it. If nao-rs-guard holds it after a takeover it hands it over once this \
                 runtime registers; else stop the other runtime (`systemctl stop hulk`, or find \
                 it with `fuser -v /dev/bus/usb/*/*`)"
            ),
            StartError::Startup(e) => write!(f, "{e}"),
            StartError::Thread(e) => write!(f, "cannot start a runtime thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

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
    /// The motion state of the last frame ([`Motion::code`]), as published
    /// in the page.
    pub motion: AtomicU32,
    /// Allocations made by the cycle thread from its first cycle on, as
    /// counted by [`nao_kit::alloc::CountingAlloc`] (0 without it; see
    /// [`nao_kit::alloc::installed`]). Goal: 0.
    pub cycle_allocations: AtomicU64,
}

/// Trip and stop from any thread; cheap to clone.
#[derive(Clone)]
pub struct Handle {
    board: Arc<dyn Blackboard>,
    wake: Arc<wake::WakeSignal>,
    stop: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    status: Arc<Status>,
    latest: Arc<program::Latest>,
}

impl Handle {
    /// Trips the switch with reason `api`. No call re-arms.
    pub fn trip(&self) {
        self.board.trip(Reason::Api);
    }

    /// A person's wake (what `nao-rs wake` sends): every start is limp,
    /// and after a trip the robot stays limp until a wake in the armed
    /// epoch after the re-arm. Reads the page's wake generation now and
    /// hands it to the cycle; while the switch is tripped (or the page
    /// lost) there is none, and the wake is refused. The wake still
    /// counts only if the page is armed in that generation when the cycle
    /// reads it. For a person's action only (a button in the program's
    /// user interface), never for a controller's own decision.
    pub fn wake(&self) -> Result<u64, WakeRefused> {
        match self.board.wake_generation() {
            Some(g) => {
                self.wake.wake(g);
                Ok(g)
            }
            None => Err(WakeRefused {
                reason: self.board.reason(),
            }),
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

    /// The switch as the page says now.
    pub fn switch(&self) -> SwitchState {
        let tripped = self.board.is_tripped();
        SwitchState {
            tripped,
            reason: if tripped { self.board.reason() } else { None },
            page_lost: false,
            // Relaxed: display-only status.
            limp: tripped || self.status.limp.load(Ordering::Relaxed) != 0,
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

    /// The page.
    pub fn board(&self) -> &Arc<dyn Blackboard> {
        &self.board
    }
}

/// What the cycle saw before building a frame; handed to a [`CycleHook`].
#[derive(Debug, Clone, Copy)]
pub struct CycleInputs<'a> {
    /// The cycle's number.
    pub k: u64,
    /// The cycle's start, ms since the runtime started (the time the
    /// protocol core is given, as `t_ms * 1_000_000` ns).
    pub t_ms: u64,
    /// The command for this cycle, if any, as the protocol core gets it
    /// (after the wake latch).
    pub command: Option<&'a Command>,
    /// The switch (or the page lost) was tripped.
    pub tripped: bool,
    /// The reason in the page.
    pub reason: Option<Reason>,
    /// The page's trip count as read for this frame (the protocol core's
    /// [`CycleInput::trip_count`]).
    pub trip_count: u64,
    /// A person's wake taken before this frame: its generation (whether
    /// the latch counted it or not).
    pub wake: Option<u64>,
}

/// Something the cycle calls before each frame with the inputs and the link
/// (the recorder of `nao-rs record` writes its input lines here).
pub trait CycleHook<L>: Send + 'static {
    /// Before the settings and start-up: the accepted versions and whether
    /// the switch is armed.
    fn before_startup(&mut self, link: &mut L, accepted: &[u8], armed: bool) {
        let _ = (link, accepted, armed);
    }
    /// Before cycle `inputs.k`'s frame is built.
    fn before_cycle(&mut self, link: &mut L, inputs: &CycleInputs<'_>);
    /// After the last cycle: closes the board (`link.close()`).
    fn close(&mut self, link: &mut L)
    where
        L: Link,
    {
        link.close();
    }
}

/// The hook that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHook;

impl<L> CycleHook<L> for NoHook {
    fn before_cycle(&mut self, _link: &mut L, _inputs: &CycleInputs<'_>) {}
}

/// How the cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// Cycles run.
    pub cycles: u64,
    /// The largest lateness, ns.
    pub max_lateness_ns: u64,
    /// Cycles later than a tenth of the period.
    pub late: u64,
    /// Deadlines skipped.
    pub overruns: u64,
    /// A panic in the cycle (reason `fault` was tripped).
    pub panicked: bool,
}

/// The running runtime.
pub struct Runtime<L: Link + 'static = Box<dyn Link>> {
    identity: Identity,
    handle: Handle,
    cycle: Option<nao_kit::Actor<(L, RunSummary)>>,
    udp: Option<udp::UdpListener>,
    monitor: Option<status_file::Monitor>,
    log: Option<LogActor>,
    logbook: Logbook,
}

impl<L: Link + 'static> Runtime<L> {
    /// Starts the runtime on `link` with `board` as the death switch.
    pub fn start(
        link: L,
        board: Arc<dyn Blackboard>,
        config: Config,
    ) -> Result<(Runtime<L>, ProgramIo), StartError> {
        Self::start_with_hook(link, board, config, NoHook)
    }

    /// [`Runtime::start`] with a hook called before each frame.
    pub fn start_with_hook<H: CycleHook<L>>(
        mut link: L,
        board: Arc<dyn Blackboard>,
        config: Config,
        mut hook: H,
    ) -> Result<(Runtime<L>, ProgramIo), StartError> {
        let logger = config
            .logger
            .clone()
            .unwrap_or_else(nao_kit::log::stderr_logger);
        let logbook = Logbook::new(logger.clone());
        board.register_driver(std::process::id());
        // Every start is limp: the latch starts from the switch as found
        // now, before the start-up (a trip during the start-up is a change
        // it sees), and waits for a person's wake either way.
        let generation = board.wake_generation();
        let latch = latch::WakeLatch::new(
            generation.is_none(),
            generation.unwrap_or_else(|| board.trip_count()),
        );
        board.set_motion(if generation.is_none() {
            Motion::LimpTripped
        } else {
            Motion::LimpWaitingForWake
        });
        slog::info!(logger, "every start is limp: waiting for a person's wake (`nao-rs wake`)";
            "tripped" => generation.is_none());
        hook.before_startup(&mut link, &config.accepted, !board.is_tripped());
        let identity = open_with_retry(&mut link, &config)?;
        slog::info!(logger, "chest board up"; "body_id" => identity.body_id(),
            "chest_version" => format!("{}.{}.{}", identity.chest_version.major,
                identity.chest_version.minor, identity.chest_version.patch));

        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicBool::new(true));
        let status = Arc::new(Status::default());
        let latest = Arc::new(program::Latest::default());
        let handle = Handle {
            board: board.clone(),
            wake: Arc::new(wake::WakeSignal::default()),
            stop,
            running,
            status,
            latest: latest.clone(),
        };
        let (cmd_tx, cmd_rx) = nao_kit::ring::<Command>(config.command_capacity);

        let log = logbook.spawn().map_err(StartError::Thread)?;
        let udp = match config.udp_port {
            None => None,
            Some(port) => {
                let b2 = board.clone();
                let mut sink = logbook.sink("udp", 64);
                let (b3, h3) = (board.clone(), handle.clone());
                let handover = config
                    .udp_handover
                    .clone()
                    .unwrap_or_else(|| udp::handover_path(&deathswitch::default_path(), port));
                let l = udp::UdpListener::start_named(
                    "nao-rs-udp",
                    port,
                    handover,
                    handle.stop.clone(),
                    config.udp_priority,
                    move |r| b2.trip(r),
                    move |e| udp::log_event(&mut sink, e, port),
                    move || {
                        b3.trip(Reason::Fault);
                        h3.request_stop();
                    },
                )
                .map_err(StartError::Thread)?;
                Some(l)
            }
        };
        let guard_dead = Arc::new(AtomicBool::new(false));
        let status_path = config
            .status_file
            .clone()
            .or_else(|| status_file::default_path(board.page_path()));
        let monitor = status_file::Monitor::start(
            handle.clone(),
            status_path,
            guard_dead.clone(),
            logger.clone(),
        )
        .map_err(StartError::Thread)?;
        let mut actor = CycleActor {
            cycle: Cycle::from_identity(&identity, &config.accepted),
            guard_dead,
            board: board.clone(),
            commands: cmd_rx,
            latest: latest.clone(),
            handle: handle.clone(),
            udp: udp.as_ref().map(|u| u.shared().clone()),
            events: logbook.sink("cycle", 256),
            flags: flags::FlagObserver::new(),
            latch,
            answer_trip: false,
            page_lost: false,
            start_ns: 0,
            max_cycles: config.max_cycles,
            frame: SensorFrame::default(),
        };
        let spec = ActorSpec {
            name: "nao-rs-cycle".into(),
            priority: config.cycle_priority,
            cpu: config.cycle_cpu,
        };
        let period = config.period_ns;
        let cycle = nao_kit::spawn(spec, move || {
            let summary = actor.run(&mut link, &mut hook, period);
            (link, summary)
        })
        .map_err(StartError::Thread)?;
        for p in &cycle.placement().problems {
            slog::warn!(logger, "cycle actor placement"; "problem" => p);
        }
        let io = ProgramIo {
            commands: cmd_tx,
            latest,
            seen: 0,
            handle: handle.clone(),
        };
        Ok((
            Runtime {
                identity,
                handle,
                cycle: Some(cycle),
                udp,
                monitor: Some(monitor),
                log: Some(log),
                logbook,
            },
            io,
        ))
    }

    /// The robot's identity (known at once; the handshake goes on).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// A handle to trip and stop from any thread.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// The logger (not for real-time threads).
    pub fn logger(&self) -> &slog::Logger {
        self.logbook.logger()
    }

    /// Waits until the cycle ends (a stop request, `max_cycles`, a panic),
    /// then stops the other actors. Returns the link (closed) and the
    /// summary.
    pub fn wait(mut self) -> (Option<L>, RunSummary) {
        let result = self.cycle.take().map(|a| a.join());
        let (link, summary) = match result {
            Some(Ok((l, s))) => (Some(l), s),
            _ => (
                None,
                RunSummary {
                    cycles: 0,
                    max_lateness_ns: 0,
                    late: 0,
                    overruns: 0,
                    panicked: true,
                },
            ),
        };
        self.finish();
        (link, summary)
    }

    /// Stops the runtime (trip `shutdown`, one more all-off frame, close)
    /// and waits for it.
    pub fn stop(self) -> (Option<L>, RunSummary) {
        self.handle.request_stop();
        self.wait()
    }

    fn finish(&mut self) {
        if let Some(u) = self.udp.take() {
            u.stop();
        }
        // The last status (the cycle has ended) is written as it stops.
        if let Some(m) = self.monitor.take() {
            m.stop();
        }
        if let Some(l) = self.log.take() {
            l.stop();
        }
    }
}

impl<L: Link + 'static> Drop for Runtime<L> {
    fn drop(&mut self) {
        if let Some(a) = self.cycle.take() {
            self.handle.request_stop();
            let _ = a.join();
        }
        self.finish();
    }
}

/// Runs the start-up, retrying a busy board every `open_retry_ns` for up to
/// `open_timeout_ns`.
fn open_with_retry<L: Link>(link: &mut L, config: &Config) -> Result<Identity, StartError> {
    let t0 = monotonic_ns();
    loop {
        match Startup::run(link) {
            Ok(id) => return Ok(id),
            Err(
                e @ StartupError::Link {
                    error: LinkError::Busy,
                    ..
                },
            ) => {
                link.close();
                let waited = monotonic_ns() - t0;
                if waited >= config.open_timeout_ns {
                    return Err(StartError::Busy {
                        waited_ms: waited / 1_000_000,
                        error: e,
                    });
                }
                std::thread::sleep(std::time::Duration::from_nanos(config.open_retry_ns));
            }
            Err(e) => {
                link.close();
                return Err(StartError::Startup(e));
            }
        }
    }
}

/// The cycle actor's state.
struct CycleActor {
    cycle: Cycle,
    board: Arc<dyn Blackboard>,
    commands: rtrb::Consumer<Command>,
    latest: Arc<program::Latest>,
    handle: Handle,
    udp: Option<Arc<udp::UdpShared>>,
    /// Set by the non-real-time side while the guard named in the page is
    /// not alive.
    guard_dead: Arc<AtomicBool>,
    events: EventSink,
    flags: flags::FlagObserver,
    latch: latch::WakeLatch,
    /// The last answer tripped the switch (for the latch's next look).
    answer_trip: bool,
    page_lost: bool,
    start_ns: u64,
    max_cycles: Option<u64>,
    frame: SensorFrame,
}

impl CycleActor {
    fn run<L: Link, H: CycleHook<L>>(
        &mut self,
        link: &mut L,
        hook: &mut H,
        period_ns: u64,
    ) -> RunSummary {
        let mut ticker = Ticker::new(period_ns);
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
                    self.board.trip(Reason::Shutdown);
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
                self.board.trip(Reason::Shutdown);
                last_frames = Some(2);
            }
            let step =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.one_cycle(link, hook, &tick)));
            // Relaxed: display-only status.
            self.handle.status.cycle_allocations.store(
                nao_kit::alloc::thread_allocations() - allocations_at_start,
                Ordering::Relaxed,
            );
            if step.is_err() {
                panicked = true;
                self.board.trip(Reason::Fault);
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

    /// One cycle: check, inputs, the protocol core's cycle, heartbeat, trips,
    /// flags, sensors. Allocates nothing (with a non-allocating link).
    fn one_cycle<L: Link, H: CycleHook<L>>(
        &mut self,
        link: &mut L,
        hook: &mut H,
        tick: &Tick,
    ) -> CycleOutput {
        // A person's wake, taken before the page is read: it counts only
        // if the page is armed in its generation at this read, after it.
        let wake = self.handle.wake.take();
        // The death switch check before every frame: the page's integrity
        // (one stat), then the switch.
        if self.board.check() == PageHealth::Lost {
            if !self.page_lost {
                self.events.emit(
                    Level::Error,
                    "death switch page lost: all-off",
                    tick.cycle as i64,
                );
            }
            self.page_lost = true;
            self.board.trip(Reason::PageLost);
        }
        // The count, the switch, the count again (below).
        let count_before = self.board.trip_count();
        let page_tripped = self.board.is_tripped();
        if self.page_lost && !page_tripped {
            // A person re-armed the (repaired or new) page.
            self.page_lost = false;
        }
        // The switch's trip count as read for this frame; a count that
        // moved around the switch's read is a trip on its way (the latch
        // holds the joints limp for it).
        let trip_count = self.board.trip_count();
        let count_moved = count_before != trip_count;
        let tripped = self.page_lost || page_tripped;
        let reason = if tripped {
            self.board.reason().or(Some(Reason::PageLost))
        } else {
            None
        };
        // The wake latch, below every controller: after any trip, limp
        // until a person's wake after the re-arm.
        let answer_trip = std::mem::take(&mut self.answer_trip);
        let change = self.latch.observe(&latch::LatchInput {
            trip_count,
            tripped: tripped || count_moved,
            answer_trip,
            wake,
        });
        self.log_latch(change, tick.cycle);
        let mut command = None;
        while let Ok(c) = self.commands.pop() {
            command = Some(c);
        }
        self.latch.apply(&mut command);
        let t_ms = tick.start_ns.saturating_sub(self.start_ns) / 1_000_000;
        hook.before_cycle(
            link,
            &CycleInputs {
                k: self.cycle.k(),
                t_ms,
                command: command.as_ref(),
                tripped,
                reason,
                trip_count,
                wake,
            },
        );
        let input = CycleInput {
            command: command.as_ref(),
            tripped,
            page_lost: self.page_lost,
            trip_count,
        };
        let out = self.cycle.run(link, &input, t_ms.saturating_mul(1_000_000));
        // The heartbeat after the frame: confirmation, time, cycle.
        self.board
            .write_heartbeat(out.k, self.board.now_ns(), out.all_off);
        // The motion state this frame was built in, for every reader.
        let motion = if tripped || answer_trip {
            Motion::LimpTripped
        } else if self.latch.is_limp() {
            Motion::LimpWaitingForWake
        } else {
            Motion::Awake
        };
        self.board.set_motion(motion);
        if let Some(r) = out.trips.reason() {
            self.board.trip(r);
            self.answer_trip = true;
        }
        if let Some(f) = out.failure {
            let what = match f {
                nao_wire::protocol::cycle::ExchangeFailure::Read(_) => "USB read failed",
                nao_wire::protocol::cycle::ExchangeFailure::Answer(_) => "invalid answer",
                nao_wire::protocol::cycle::ExchangeFailure::Write(_) => "USB write failed",
            };
            self.events.emit(Level::Warning, what, out.k as i64);
        }
        match out.reconnect {
            nao_wire::protocol::cycle::Reconnect::Done => {
                self.events
                    .emit(Level::Warning, "reconnected the chest board", out.k as i64)
            }
            nao_wire::protocol::cycle::Reconnect::Failed => {
                self.events
                    .emit(Level::Error, "reconnect failed", out.k as i64)
            }
            nao_wire::protocol::cycle::Reconnect::None => {}
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
        let (f, changed) = self.flags.observe(&out, outside);
        if !changed.is_empty() {
            self.board.set_safety_flags(f.bits());
            for bit in changed.iter() {
                let what = flags::text(bit);
                self.events
                    .emit(Level::Warning, what, i64::from(f.contains(bit)));
            }
        }
        self.publish(&out, tick, tripped, reason, f, motion);
        out
    }

    fn log_latch(&mut self, change: latch::Change, cycle: u64) {
        let (level, what) = match change {
            latch::Change::Unchanged => return,
            latch::Change::Tripped => (
                Level::Warning,
                "trip seen: every stiffness 0 until re-armed and woken (cycle)",
            ),
            latch::Change::Rearmed => (
                Level::Info,
                "re-armed: still limp until `nao-rs wake` (cycle)",
            ),
            latch::Change::Woken => (Level::Info, "woken: commands pass again (cycle)"),
            latch::Change::WakeWhileTripped => (
                Level::Warning,
                "wake ignored: the switch is tripped; re-arm (`naoctl rearm`), then wake (cycle)",
            ),
            latch::Change::WakeStale => (
                Level::Warning,
                "wake ignored: its generation is not the page's now (sent before a trip or a \
                 re-arm, or for another page); wake again (cycle)",
            ),
        };
        self.events.emit(level, what, cycle as i64);
    }

    fn publish(
        &mut self,
        out: &CycleOutput,
        tick: &Tick,
        tripped: bool,
        reason: Option<Reason>,
        f: SafetyFlags,
        motion: Motion,
    ) {
        let s = &out.sensors;
        let fr = &mut self.frame;
        fr.cycle = out.k;
        fr.t_ns = tick.start_ns.saturating_sub(self.start_ns);
        fr.position = s.position;
        fr.current_ma = s.current_ma;
        fr.temperature = s.temperature;
        fr.joint_status = s.joint_status;
        fr.stiffness_sent = out.stiffness;
        fr.imu = s.imu;
        fr.battery = s.battery;
        fr.sonar_mm = s.sonar_mm;
        fr.foot_pressure = s.foot_pressure;
        fr.bumpers = s.bumpers;
        fr.chest_button = s.chest_button;
        fr.switch = SwitchState {
            tripped,
            reason,
            page_lost: self.page_lost,
            limp: self.latch.is_limp(),
        };
        fr.all_off = out.all_off;
        fr.safety = f;
        fr.lateness_ns = tick.lateness_ns;
        self.latest.publish(fr);
        let st = &self.handle.status;
        // Relaxed: display-only status.
        st.cycles.store(out.k + 1, Ordering::Relaxed);
        st.lateness_ns.store(tick.lateness_ns, Ordering::Relaxed);
        st.max_lateness_ns
            .fetch_max(tick.lateness_ns, Ordering::Relaxed);
        st.overruns.fetch_add(tick.skipped, Ordering::Relaxed);
        st.max_stiffness.store(
            out.stiffness.iter().copied().max().unwrap_or(0) as u32,
            Ordering::Relaxed,
        );
        st.flags.store(f.bits(), Ordering::Relaxed);
        st.tripped.store(u32::from(tripped), Ordering::Relaxed);
        st.limp
            .store(u32::from(self.latch.is_limp()), Ordering::Relaxed);
        st.motion.store(motion.code(), Ordering::Relaxed);
    }
}
