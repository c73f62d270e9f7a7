//! `nao-rs run`: hosts the runtime on the chest board or the virtual robot.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use signal_hook::consts::signal::{SIGALRM, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use nao_runtime::controller::{self, Idle, Stand};
use nao_runtime::{wake, Config, Handle, ProgramIo, Reason, Runtime, Switch};
use nao_wire::link::sim::SimLink;
use nao_wire::link::usb::UsbLink;
use nao_wire::link::Link;
use nao_wire::protocol::chest_button::{ChestButtonMode, HOLD_MS_MAX, HOLD_MS_MIN};

/// The controller `nao-rs run` hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControllerKind {
    /// Command nothing (HAL's safety keeps every joint at stiffness 0).
    None,
    /// Ramp slowly into a standing pose; limp while the runtime holds the
    /// robot limp (after a trip, until re-armed and `nao-rs wake`).
    Stand,
    /// The LoLA socket for an unmodified robot program (actors/src/lola).
    Lola,
}

/// The options `nao-rs run` and `nao-rs bringup` share: the link, the
/// page, the stop and wake ways in, the cycle's priority and the accepted
/// board versions.
#[derive(clap::Args, Debug, Clone)]
pub struct HostArgs {
    /// `usb` (the chest board) or `sim:PATH` (the virtual robot's socket).
    #[arg(long, default_value = "usb")]
    pub link: String,
    /// The UDP stop port.
    #[arg(long, default_value_t = deathswitch::stop::PORT)]
    pub udp_port: u16,
    /// Do not listen for the UDP stop (tests; the guard still reads the port).
    #[arg(long)]
    pub no_udp: bool,
    /// The death switch page (default: $NAO_RS_DEATHSWITCH or /run/nao-rs/deathswitch).
    #[arg(long)]
    pub page: Option<PathBuf>,
    /// The wake socket (default: $NAO_RS_WAKE_SOCKET or wake.sock next to the page).
    #[arg(long)]
    pub wake_socket: Option<PathBuf>,
    /// The cycle's SCHED_FIFO priority (0: normal policy).
    #[arg(long, default_value_t = nao_runtime::CYCLE_PRIORITY)]
    pub priority: u8,
    /// Accepted motor board configuration versions (`--accepted 10,11`
    /// also takes a version 11 board).
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub accepted: Vec<u8>,
}

impl HostArgs {
    /// The runtime's configuration of these options, for the page at
    /// `page_path` (the UDP stop's hand-over file is next to it).
    pub fn config(&self, page_path: &Path) -> Config {
        Config {
            cycle_priority: (self.priority > 0).then_some(self.priority),
            udp_port: (!self.no_udp).then_some(self.udp_port),
            udp_handover: Some(deathswitch::stop::udp::handover_path(
                page_path,
                self.udp_port,
            )),
            accepted: self.accepted.clone(),
            ..Config::default()
        }
    }
}

/// Options of `nao-rs run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The link, page, stop, wake, priority and accepted versions.
    #[command(flatten)]
    pub host: HostArgs,
    /// What commands the body.
    #[arg(long, value_enum, default_value = "none")]
    pub controller: ControllerKind,
    /// Pin the cycle to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Stop by itself after this many seconds.
    #[arg(long)]
    pub seconds: Option<u64>,
    /// The status file, one JSON line rewritten every 100 ms (default:
    /// $NAO_RS_STATUS, or status.json next to the page).
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// The LoLA socket for `--controller lola` (default: LoLA's path).
    #[arg(long)]
    pub lola_socket: Option<PathBuf>,
    /// Which chest button press stops the robot: `trip` (every press, the
    /// default) or `hold:MS` (a press held MS ms, 300..=3000; a shorter one
    /// reaches the program only). `NAO_RS_CHEST_BUTTON` in
    /// /etc/nao-rs/nao-rs.conf on the robot.
    #[arg(long, default_value = "trip", value_parser = parse_chest_button)]
    pub chest_button: ChestButtonMode,
    /// A fault to inject, for the guard's tests only (`never-confirm`,
    /// `freeze-registered`, `freeze-linked`, `crash-on-usr2`); built only
    /// with the `fault-injection` feature, which no robot build enables.
    #[cfg(feature = "fault-injection")]
    #[arg(long, value_parser = parse_fault)]
    pub fault: Option<nao_runtime::fault::Fault>,
}

/// The `--chest-button` value, or an error naming the setting, the value,
/// the allowed range and the file it comes from on the robot.
pub fn parse_chest_button(v: &str) -> Result<ChestButtonMode, String> {
    ChestButtonMode::parse(v).map_err(|e| {
        format!(
            "{v:?}: {e}. Set `trip` or `hold:MS` with MS from {HOLD_MS_MIN} to {HOLD_MS_MAX} \
             (on the robot: NAO_RS_CHEST_BUTTON in {CONF_FILE})"
        )
    })
}

/// The settings file both units read (config/nao-rs.conf).
pub const CONF_FILE: &str = "/etc/nao-rs/nao-rs.conf";

#[cfg(feature = "fault-injection")]
fn parse_fault(v: &str) -> Result<nao_runtime::fault::Fault, String> {
    nao_runtime::fault::Fault::from_name(v).ok_or_else(|| {
        format!("{v:?}: use never-confirm, freeze-registered, freeze-linked or crash-on-usr2")
    })
}

/// The link of a `--link` value.
pub fn open_link(arg: &str) -> Result<Box<dyn Link>, String> {
    if arg == "usb" {
        return Ok(Box::new(UsbLink::new()));
    }
    match SimLink::from_link_arg(arg) {
        Some(l) => Ok(Box::new(l)),
        None => Err(format!(
            "--link {arg:?}: use `usb` or `sim:PATH` (the virtual robot's socket)"
        )),
    }
}

/// Opens the page at `path` (or the default).
pub fn open_page(path: Option<&Path>) -> Result<(Arc<deathswitch::Page>, PathBuf), String> {
    let path = path
        .map(Path::to_path_buf)
        .unwrap_or_else(deathswitch::default_path);
    match deathswitch::Page::open(&path) {
        Ok(p) => Ok((Arc::new(p), path)),
        Err(e) => Err(format!(
            "{e}. Fix: create /run/nao-rs (systemd-tmpfiles, see config/) and join group hal, \
             or set NAO_RS_DEATHSWITCH / --page to a writable path"
        )),
    }
}

/// Every signal whose default action ends the process and that a person or
/// a service manager sends to end it: each one stops the runtime safely
/// (trip `shutdown`, the last frame all-off) instead of killing it with a
/// stiff last frame. (SIGKILL cannot be caught: the guard covers it.)
pub const STOP_SIGNALS: [i32; 7] = [SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGINT];

/// Installs the handlers for [`STOP_SIGNALS`] now (`signal-hook`: the
/// handler only records the signal); a signal that comes before
/// [`stop_on_signals`] runs is kept and acted on then.
pub fn catch_stop_signals() -> Result<Signals, String> {
    Signals::new(STOP_SIGNALS).map_err(|e| {
        format!("cannot install the signal handlers (SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGINT): {e}")
    })
}

/// Waits in a thread for the first of [`STOP_SIGNALS`], then asks `handle`
/// to stop (later ones change nothing: the stop is under way).
pub fn stop_on_signals(mut signals: Signals, handle: Handle) {
    let _ = nao_kit::actor::thread("nao-rs-signals").spawn(move || {
        if signals.forever().next().is_some() {
            handle.request_stop();
        }
    });
}

/// Locks every page of the process in memory, now and later
/// (`mlockall(MCL_CURRENT | MCL_FUTURE)`), so no page fault delays a cycle.
/// Where not permitted, says so once (on stderr) and goes on.
pub fn lock_memory() {
    use nix::sys::mman::{mlockall, MlockAllFlags};
    if let Err(e) = mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE) {
        eprintln!(
            "nao-rs run: warning: memory not locked (mlockall: {e}): page faults may delay \
             cycles. Fix: run as root or with CAP_IPC_LOCK, or raise the limit \
             (LimitMEMLOCK=infinity in the systemd unit, `ulimit -l unlimited`)"
        );
    }
}

/// What `nao-rs run` and `nao-rs bringup` hold before the runtime starts:
/// the stop signals caught, memory locked, the page open and the wake
/// socket bound (a path held by another program or user is an error
/// before any frame, with a non-zero exit; mode 0660 whatever the umask).
pub struct Host {
    signals: Signals,
    wake: wake::BoundWake,
    /// The page.
    pub board: Arc<dyn Switch>,
    /// Where the page is.
    pub page_path: PathBuf,
}

impl Host {
    /// Catches the stop signals, locks memory, opens the page and binds
    /// the wake socket of `args`.
    pub fn open(args: &HostArgs) -> Result<Host, String> {
        let signals = catch_stop_signals()?;
        lock_memory();
        let (board, page_path) = open_page(args.page.as_deref())?;
        let wake_path = args
            .wake_socket
            .clone()
            .unwrap_or_else(|| wake::socket_path(&page_path));
        let wake = wake::WakeListener::bind(&wake_path).map_err(|e| e.to_string())?;
        Ok(Host {
            signals,
            wake,
            board,
            page_path,
        })
    }

    /// Once `rt` runs: the stop signals ask it to stop, and the wake socket
    /// feeds its wake latch (below every controller) until the returned
    /// listener is dropped. Without a listener `rt` is stopped.
    pub fn serve<L: Link + 'static>(self, rt: Runtime<L>) -> Result<Serving<L>, String> {
        let handle = rt.handle();
        stop_on_signals(self.signals, handle.clone());
        match self
            .wake
            .start(handle.wake_signal().clone(), rt.logger().clone())
        {
            Ok(wake) => Ok(Serving { rt, handle, wake }),
            Err(e) => abandon(rt, format!("cannot start the wake listener: {e}")),
        }
    }
}

/// A runtime served by a [`Host`]: the signals and wake socket reach it.
pub struct Serving<L: Link + 'static> {
    /// The runtime.
    pub rt: Runtime<L>,
    /// Its handle.
    pub handle: Handle,
    /// Its wake listener, running until dropped.
    pub wake: wake::WakeListener,
}

/// Stops `rt`, waits for its last frame, and fails with `why`: for what
/// goes wrong once the runtime has started.
pub fn abandon<L: Link + 'static, T>(rt: Runtime<L>, why: String) -> Result<T, String> {
    rt.handle().request_stop();
    let _ = rt.wait();
    Err(why)
}

/// Runs the controller in its own thread. A panic in it trips `fault` and
/// stops the runtime.
fn spawn_controller(
    kind: ControllerKind,
    mut io: ProgramIo,
    board: Arc<dyn Switch>,
    lola: Option<nao_runtime::lola::LolaServer>,
) -> Result<std::thread::JoinHandle<()>, String> {
    nao_kit::actor::thread("nao-rs-control")
        .stack_size(nao_runtime::lola::SERVER_STACK_BYTES)
        .spawn(move || {
            let handle = io.handle().clone();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match kind {
                ControllerKind::None => controller::run(&mut io, &mut Idle),
                ControllerKind::Stand => controller::run(&mut io, &mut Stand::new()),
                ControllerKind::Lola => {
                    // The LoLA socket (actors/src/lola), bound before the
                    // runtime started, is the controller: it takes the
                    // ProgramIo.
                    if let Some(server) = lola {
                        nao_runtime::lola::serve_runtime_on(server, io);
                    }
                }
            }));
            if r.is_err() {
                board.trip(Reason::Fault);
                handle.request_stop();
            }
        })
        .map_err(|e| format!("cannot start the controller thread: {e}"))
}

/// The robot's identity in the LoLA sensor frames, known once the runtime
/// has started up (its body, its head, its foot pressure calibration).
pub fn describe_robot(
    server: &mut nao_runtime::lola::LolaServer,
    identity: &nao_wire::protocol::startup::Identity,
    logger: &slog::Logger,
) {
    let head = nao_runtime::lola::runtime_body::system_head_id();
    let c = nao_runtime::lola::LolaConfig::from_identity(identity, head.as_deref(), logger.clone());
    let cfg = server.config_mut();
    cfg.robot_config = c.robot_config;
    cfg.foot_pressure = c.foot_pressure;
}

/// Runs `nao-rs run`.
pub fn main(args: RunArgs) -> Result<(), String> {
    nao_wire::protocol::handshake::check_accepted(&args.host.accepted)
        .map_err(|e| format!("--accepted: {e}"))?;
    // systemd's stop socket (nao-rs-stop.socket), before any thread runs.
    deathswitch::stop::udp::inherit_from_systemd();
    let host = Host::open(&args.host)?;
    let board = host.board.clone();
    let page_path = host.page_path.clone();
    let logger = nao_kit::log::stderr_logger();
    // Bound before the runtime starts, as the wake socket.
    let mut lola = match args.controller {
        ControllerKind::Lola => {
            let mut c = nao_runtime::lola::LolaConfig::new(logger.clone());
            if let Some(p) = &args.lola_socket {
                c.socket = p.clone();
            }
            Some(nao_runtime::lola::LolaServer::bind(c).map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    let link = open_link(&args.host.link)?;
    let config = Config {
        cycle_cpu: args.cpu,
        logger: Some(logger),
        status_file: args.status_file.clone(),
        chest_button: args.chest_button,
        #[cfg(feature = "fault-injection")]
        fault: args.fault,
        ..args.host.config(&page_path)
    };
    let (rt, io) = Runtime::start(link, board.clone(), config).map_err(|e| e.to_string())?;
    let id = rt.identity();
    slog::info!(rt.logger(), "runtime started: limp until a person's wake (`nao-rs wake`)";
        "body_id" => id.body_id(),
        "page" => page_path.display().to_string(), "link" => &args.host.link,
        "controller" => format!("{:?}", args.controller),
        "chest_button" => %args.chest_button);
    slog::info!(
        rt.logger(),
        "start-up facts: {}",
        nao_kit::facts::StartupFacts::probe()
    );
    let Serving {
        rt,
        handle,
        wake: _wake,
    } = host.serve(rt)?;
    if let Some(server) = lola.as_mut() {
        describe_robot(server, rt.identity(), rt.logger());
    }
    let controller = match spawn_controller(args.controller, io, board.clone(), lola) {
        Ok(c) => c,
        Err(e) => return abandon(rt, e),
    };
    let t0 = std::time::Instant::now();
    // Polled often: once the last (all-off) frame is out the process exits
    // within a few ms, well inside the guard's beat timeout, so the guard
    // sees the exit through its pidfd rather than a lost heartbeat.
    while handle.is_running() {
        if args
            .seconds
            .is_some_and(|s| t0.elapsed() >= Duration::from_secs(s))
        {
            handle.request_stop();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let logger = rt.logger().clone();
    let (_, summary) = rt.wait();
    // The controller sees the stop at its next sensor wait; it is given
    // 20 ms to end (the LoLA socket's clean-up), never more: a stopped
    // runtime does not linger.
    let deadline = std::time::Instant::now() + Duration::from_millis(20);
    while !controller.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    if controller.is_finished() {
        let _ = controller.join();
    }
    slog::info!(logger, "runtime stopped"; "cycles" => summary.cycles,
        "max_lateness_us" => summary.max_lateness_ns / 1000, "late" => summary.late,
        "overruns" => summary.overruns, "reason" => board.read().reason.map(Reason::name));
    if summary.panicked {
        return Err("the cycle panicked: the switch was tripped (fault)".into());
    }
    Ok(())
}
