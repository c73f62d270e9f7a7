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

/// Options of `nao-rs run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// `usb` (the chest board) or `sim:PATH` (the virtual robot's socket).
    #[arg(long, default_value = "usb")]
    pub link: String,
    /// What commands the body.
    #[arg(long, value_enum, default_value = "none")]
    pub controller: ControllerKind,
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
    /// Pin the cycle to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Accepted motor board configuration versions.
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub accepted: Vec<u8>,
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
    /// A fault to inject, for the guard's tests only (`never-confirm`,
    /// `freeze-registered`, `freeze-linked`, `crash-on-usr2`); built only
    /// with the `fault-injection` feature, which no robot build enables.
    #[cfg(feature = "fault-injection")]
    #[arg(long, value_parser = parse_fault)]
    pub fault: Option<nao_runtime::fault::Fault>,
}

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
    let _ = std::thread::Builder::new()
        .name("nao-rs-signals".into())
        .spawn(move || {
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

/// Runs the controller in its own thread. A panic in it trips `fault` and
/// stops the runtime.
fn spawn_controller(
    kind: ControllerKind,
    mut io: ProgramIo,
    board: Arc<dyn Switch>,
    lola: Option<nao_runtime::lola::LolaServer>,
) -> Result<std::thread::JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("nao-rs-control".into())
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
    nao_wire::protocol::handshake::check_accepted(&args.accepted)
        .map_err(|e| format!("--accepted: {e}"))?;
    let signals = catch_stop_signals()?;
    // systemd's stop socket (nao-rs-stop.socket), before any thread runs.
    deathswitch::stop::udp::inherit_from_systemd();
    lock_memory();
    let (page, page_path) = open_page(args.page.as_deref())?;
    let board: Arc<dyn Switch> = page;
    // The sockets are bound before the runtime starts: a path held by
    // another program (or user) is an error before any frame, with a
    // non-zero exit. Both get mode 0660 whatever the umask.
    let wake_path = args
        .wake_socket
        .clone()
        .unwrap_or_else(|| wake::socket_path(&page_path));
    let bound_wake = wake::WakeListener::bind(&wake_path).map_err(|e| e.to_string())?;
    let logger = nao_kit::log::stderr_logger();
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
    let link = open_link(&args.link)?;
    let config = Config {
        cycle_priority: (args.priority > 0).then_some(args.priority),
        cycle_cpu: args.cpu,
        udp_port: (!args.no_udp).then_some(args.udp_port),
        udp_handover: Some(deathswitch::stop::udp::handover_path(
            &page_path,
            args.udp_port,
        )),
        accepted: args.accepted.clone(),
        logger: Some(logger),
        status_file: args.status_file.clone(),
        #[cfg(feature = "fault-injection")]
        fault: args.fault,
        ..Config::default()
    };
    let (rt, io) = Runtime::start(link, board.clone(), config).map_err(|e| e.to_string())?;
    let handle = rt.handle();
    stop_on_signals(signals, handle.clone());
    let id = rt.identity();
    slog::info!(rt.logger(), "runtime started: limp until a person's wake (`nao-rs wake`)";
        "body_id" => id.body_id(),
        "page" => page_path.display().to_string(), "link" => &args.link,
        "controller" => format!("{:?}", args.controller));
    // The wake socket feeds the runtime's wake latch (below every
    // controller), whatever the controller.
    let _wake = match bound_wake.start(handle.wake_signal().clone(), rt.logger().clone()) {
        Ok(l) => l,
        Err(e) => {
            handle.request_stop();
            let _ = rt.wait();
            return Err(format!("cannot start the wake listener: {e}"));
        }
    };
    if let Some(server) = lola.as_mut() {
        describe_robot(server, rt.identity(), rt.logger());
    }
    let controller = match spawn_controller(args.controller, io, board.clone(), lola) {
        Ok(c) => Some(c),
        Err(e) => {
            handle.request_stop();
            let _ = rt.wait();
            return Err(e);
        }
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
    if let Some(c) = controller {
        let deadline = std::time::Instant::now() + Duration::from_millis(20);
        while !c.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if c.is_finished() {
            let _ = c.join();
        }
    }
    slog::info!(logger, "runtime stopped"; "cycles" => summary.cycles,
        "max_lateness_us" => summary.max_lateness_ns / 1000, "late" => summary.late,
        "overruns" => summary.overruns, "reason" => board.read().reason.map(Reason::name));
    if summary.panicked {
        return Err("the cycle panicked: the switch was tripped (fault)".into());
    }
    Ok(())
}
