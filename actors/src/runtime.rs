//! [`Runtime`]: starting the runtime (registration, the start-up with its
//! busy-board retry, the actors) and stopping it; [`CycleHook`], what the
//! recorder of `nao-rs record` plugs into the cycle.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use deathswitch::stop::udp::{
    describe, handover_path, Holders, ListenConfig, UdpEvent, UdpListener,
};
use deathswitch::{Reason, Switch};
use nao_kit::log::{EventSink, LogActor, Logbook};
use nao_kit::{actor::ActorSpec, clock::Clock};
use nao_wire::link::{Link, LinkError};
use nao_wire::protocol::bringup::BringUp;
use nao_wire::protocol::chest_button::ChestButtonMode;
use nao_wire::protocol::gate::WakeLatch;
use nao_wire::protocol::startup::{Identity, Startup, StartupError};
use nao_wire::step::{Observed, Step};
use nao_wire::Command;

use crate::config::{Config, StartError};
use crate::cycle_actor::{CycleActor, CycleParts};
use crate::handle::{Handle, JogSignal, Status};
use crate::program::{self, ProgramIo};
use crate::{status_file, wake};

/// Something the cycle calls before each frame with what the step read and
/// decided and the link (the recorder of `nao-rs record` writes its input
/// lines here).
pub trait CycleHook<L>: Send + 'static {
    /// Before the settings and start-up: the accepted versions and whether
    /// the switch is armed.
    fn before_startup(&mut self, link: &mut L, accepted: &[u8], armed: bool) {
        let _ = (link, accepted, armed);
    }
    /// Before cycle `seen.k`'s frame is built: what the step read and
    /// decided, and its input (the controller's command as given, before
    /// the gate).
    fn before_cycle(&mut self, link: &mut L, seen: &Observed<'_>);
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
    fn before_cycle(&mut self, _link: &mut L, _seen: &Observed<'_>) {}
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
    cycle: Option<nao_kit::actor::Actor<(L, RunSummary)>>,
    udp: Option<UdpListener>,
    monitor: Option<status_file::Monitor>,
    log: Option<LogActor>,
    logbook: Logbook,
    /// The exit-watch connection's thread; stopped with the runtime.
    _exit_watch: Option<ExitWatch>,
}

/// The runtime's end of the guard's exit watch
/// (`deathswitch::exit_watch::keep_connected`), on thread
/// `nao-rs-exitwatch` at normal priority: connected from the registration
/// on, so the guard sees this process's exit at once on any kernel. Its
/// drop (the runtime stopped, or its start failed) ends the thread, which
/// closes the connection.
struct ExitWatch(Arc<AtomicBool>);

impl ExitWatch {
    /// Starts the thread for the page at `page`; None when it cannot start
    /// (the pidfd, where there is one, and the heartbeat still see an exit).
    fn start(page: &std::path::Path) -> Option<ExitWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let (page, s) = (page.to_path_buf(), stop.clone());
        nao_kit::actor::thread("nao-rs-exitwatch")
            .spawn(move || deathswitch::exit_watch::keep_connected(&page, &s))
            .ok()?;
        Some(ExitWatch(stop))
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        // Release: pairs with the Acquire loads in keep_connected.
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl<L: Link + 'static> Runtime<L> {
    /// Starts the runtime on `link` with `switch` as the death switch.
    ///
    /// # Errors
    /// [`StartError`]: the board stayed busy, the start-up failed, or a
    /// thread could not be started.
    pub fn start(
        link: L,
        switch: Arc<dyn Switch>,
        config: Config,
    ) -> Result<(Runtime<L>, ProgramIo), StartError> {
        Self::start_with_hook(link, switch, config, NoHook)
    }

    /// [`Runtime::start`] with a hook called before each frame.
    ///
    /// # Errors
    /// As [`Runtime::start`].
    pub fn start_with_hook<H: CycleHook<L>>(
        mut link: L,
        switch: Arc<dyn Switch>,
        config: Config,
        mut hook: H,
    ) -> Result<(Runtime<L>, ProgramIo), StartError> {
        let logger = config
            .logger
            .clone()
            .unwrap_or_else(nao_kit::log::stderr_logger);
        let logbook = Logbook::new(logger.clone());
        switch.register(std::process::id());
        let exit_watch = switch.path().and_then(ExitWatch::start);
        #[cfg(feature = "fault-injection")]
        if config.fault == Some(crate::fault::Fault::FreezeRegistered) {
            crate::fault::freeze();
        }
        // The stop port first, before anything else of the start (the
        // board's start-up may take seconds: a busy board is retried): a
        // stop queued while no runtime ran trips now, not after the board
        // answers (docs/runtime.md, "The UDP stop").
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicBool::new(true));
        let status = Arc::new(Status::default());
        let latest = Arc::new(program::Latest::default());
        let handle = Handle {
            switch: switch.clone(),
            wake: Arc::new(wake::WakeSignal::default()),
            jog: Arc::new(JogSignal::default()),
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
                // The one UDP stop listener of both processes
                // (deathswitch::stop::udp), on a panic-guarded actor.
                let b2 = switch.clone();
                let mut sink = logbook.sink("udp", 64);
                let (b3, h3) = (switch.clone(), handle.clone());
                let handover = config
                    .udp_handover
                    .clone()
                    .unwrap_or_else(|| handover_path(&deathswitch::default_path(), port));
                let spec = ActorSpec {
                    name: "nao-rs-udp".into(),
                    priority: config.udp_priority,
                    cpu: None,
                };
                let l = UdpListener::start(
                    // Handed over to the runtime and guard the page
                    // registers only.
                    // Its timers on the switch's clock.
                    ListenConfig::new(port, handover)
                        .with_holders(Holders::of(switch.clone()))
                        .with_clock(Arc::new(switch.clone())),
                    handle.stop.clone(),
                    move |r| {
                        b2.trip(r);
                    },
                    move |e| log_udp_event(&mut sink, e, port),
                    |listening| {
                        let on_panic = move || {
                            b3.trip(Reason::Fault);
                            h3.request_stop();
                        };
                        let actor =
                            nao_kit::actor::spawn_guarded(spec, move || listening.run(), on_panic)?;
                        Ok(move || {
                            let _ = actor.join();
                        })
                    },
                )
                .map_err(StartError::Thread)?;
                Some(l)
            }
        };
        // Every start is limp: the gate starts from the switch as read now,
        // before the start-up (a trip during the start-up is a change it
        // sees), and waits for a person's wake either way.
        let start = switch.read();
        slog::info!(logger, "every start is limp: waiting for a person's wake (`nao-rs wake`)";
            "tripped" => !start.armed);
        hook.before_startup(&mut link, &config.accepted, start.armed);
        let identity = open_with_retry(&mut link, &config, switch.clock())?;
        slog::info!(logger, "chest board up"; "body_id" => identity.body_id(),
            "chest_version" => format!("{}.{}.{}", identity.chest_version.major,
                identity.chest_version.minor, identity.chest_version.patch));
        #[cfg(feature = "fault-injection")]
        if config.fault == Some(crate::fault::Fault::FreezeLinked) {
            crate::fault::freeze();
        }
        #[cfg(feature = "fault-injection")]
        let wake_latch = if config.fault == Some(crate::fault::Fault::NeverConfirm) {
            WakeLatch::Off
        } else {
            WakeLatch::On
        };
        #[cfg(not(feature = "fault-injection"))]
        let wake_latch = WakeLatch::On;
        // Bring-up always runs `trip`: every press stops the one joint.
        let chest_button = if config.bringup.is_some() {
            ChestButtonMode::Trip
        } else {
            config.chest_button
        };
        let mut step = Step::new(&identity, &config.accepted, &start, wake_latch)
            .with_chest_button(chest_button);
        slog::info!(logger, "chest button"; "mode" => %chest_button,
        "stops" => match chest_button {
            ChestButtonMode::Trip => "every press".to_string(),
            ChestButtonMode::Hold { ms } => format!("a press held {ms} ms; shorter presses reach the program only"),
        });
        if let Some(b) = &config.bringup {
            step = step.with_bringup(BringUp::new(b.joint, b.limits));
            slog::warn!(logger, "bring-up: only this joint may move, with a person at the robot";
                "joint" => b.joint.name());
        }

        let guard_dead = Arc::new(AtomicBool::new(false));
        let status_path = config
            .status_file
            .clone()
            .or_else(|| status_file::default_path(switch.path()));
        let monitor = status_file::Monitor::start(
            handle.clone(),
            chest_button,
            status_path,
            guard_dead.clone(),
            logger.clone(),
        )
        .map_err(StartError::Thread)?;
        let mut actor = CycleActor::new(CycleParts {
            step,
            switch: switch.clone(),
            commands: cmd_rx,
            latest: latest.clone(),
            handle: handle.clone(),
            udp: udp.as_ref().map(|u| u.shared().clone()),
            guard_dead,
            events: logbook.sink("cycle", 256),
            max_cycles: config.max_cycles,
            bringup: config.bringup.is_some(),
            #[cfg(feature = "fault-injection")]
            fault: config.fault,
        });
        let spec = ActorSpec {
            name: "nao-rs-cycle".into(),
            priority: config.cycle_priority,
            cpu: config.cycle_cpu,
        };
        let period = config.period_ns;
        let cycle = nao_kit::actor::spawn(spec, move || {
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
                _exit_watch: exit_watch,
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

/// Queues the log line of the UDP listener's event `e` on `sink`
/// (`deathswitch::stop::udp::describe`).
fn log_udp_event(sink: &mut EventSink, e: UdpEvent, port: u16) {
    let (level, what, value) = describe(e, port);
    sink.emit(level, what, value);
}

/// Runs the start-up, retrying a busy board every `open_retry_ns` for up to
/// `open_timeout_ns` on `clock` (the switch's).
fn open_with_retry<L: Link>(
    link: &mut L,
    config: &Config,
    clock: &dyn Clock,
) -> Result<Identity, StartError> {
    let t0 = clock.now_ns();
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
                let now = clock.now_ns();
                let waited = now.saturating_sub(t0);
                if waited >= config.open_timeout_ns {
                    return Err(StartError::Busy {
                        waited_ms: waited / 1_000_000,
                        error: e,
                    });
                }
                clock.sleep_until_ns(now.saturating_add(config.open_retry_ns));
            }
            Err(e) => {
                link.close();
                return Err(StartError::Startup(e));
            }
        }
    }
}
