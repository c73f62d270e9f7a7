//! The guard: takes the chest board over when the runtime hangs, crashes or
//! does not obey a trip. See `docs/guard.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;
use deathswitch::rules::Settings;
use deathswitch::{Page, Reason};
use nao_kit as kit;
use nao_kit::clock::Clock;
use nao_rs_guard::board::WireBoard;
use nao_rs_guard::log::{emit, stderr_logbook, GuardEvent, RING_CAPACITY};
use nao_rs_guard::poller::{Poller, POLL_PERIOD_NS};
use nao_rs_guard::rt::GUARD_PRIORITY;
use nao_rs_guard::{fds, link, lock, signals, udp};

/// nao-rs-guard: the second layer of the death switch.
#[derive(Parser, Debug)]
#[command(name = "nao-rs-guard", version, about)]
struct GuardArgs {
    /// The death switch page (default: $NAO_RS_DEATHSWITCH or /run/nao-rs/deathswitch).
    #[arg(long)]
    page: Option<PathBuf>,
    /// The chest board: `usb`, or `sim:PATH` for the virtual robot's socket.
    #[arg(long, default_value = "usb")]
    link: String,
    /// The UDP stop port; 0 turns the guard's UDP stop off.
    #[arg(long, default_value_t = deathswitch::stop::PORT)]
    udp_port: u16,
    /// Guard rule 2: take over when the runtime's last beat is older than this.
    #[arg(long, default_value_t = 60)]
    beat_timeout_ms: u64,
    /// Guard rule 3: take over when a trip stays unconfirmed for longer than this.
    #[arg(long, default_value_t = 40)]
    confirm_window_ms: u64,
}

/// SIGTERM and SIGINT end the guard: `signal-hook` sets the returned flag
/// (the handler only stores to it), the poll loop shuts down on it.
fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

fn main() -> ExitCode {
    // First: no signal but TERM and INT ends the guard (docs/guard.md).
    let unignored = signals::ignore_all_but_term_and_int();
    // systemd's stop socket (nao-rs-stop.socket), before any thread runs.
    udp::inherit_from_systemd();
    let args = GuardArgs::parse();
    if !unignored.is_empty() {
        eprintln!("nao-rs-guard: could not ignore signals {unignored:?}");
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("nao-rs-guard: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: GuardArgs) -> Result<(), String> {
    if args.beat_timeout_ms == 0 || args.confirm_window_ms == 0 {
        return Err(format!(
            "--beat-timeout-ms {} / --confirm-window-ms {}: both must be at least 1 (defaults 60 and 40)",
            args.beat_timeout_ms, args.confirm_window_ms
        ));
    }
    let page_path = args.page.clone().unwrap_or_else(deathswitch::default_path);
    let link = link::from_arg(&args.link)?;
    // One guard per page, before the page is touched; then what a
    // take-over needs (descriptors), or no start.
    let _lock = lock::GuardLock::take(&page_path)?;
    fds::raise_nofile();
    let page = Arc::new(Page::open(&page_path).map_err(|e| format!("cannot open the page: {e}"))?);
    // The exit watch's socket (deathswitch::exit_watch): the runtime's exit
    // at once without pidfds too. Bound after the lock (only this guard
    // replaces the file) and before the reserve (a guard that starts at a
    // low descriptor limit has it).
    let exits = deathswitch::exit_watch::Listener::bind(&page_path);
    let reserve = fds::FdReserve::take(fds::RESERVE).map_err(fds::too_low)?;
    let settings = Settings {
        beat_timeout_ns: args.beat_timeout_ms * 1_000_000,
        confirmation_window_ns: args.confirm_window_ms * 1_000_000,
    };
    let signalled = stop_on_signals()
        .map_err(|e| format!("cannot install the SIGTERM/SIGINT handlers: {e}"))?;

    let pid = std::process::id();
    page.set_guard(pid, false);

    let stop = Arc::new(AtomicBool::new(false));
    // The kit's logging actor: a ring per thread, written at normal priority.
    let book = stderr_logbook();
    let loop_log = book.sink("guard-poll", RING_CAPACITY);
    let udp_log = book.sink("guard-udp", RING_CAPACITY);
    let udp_stops = book.sink("guard-udp-stop", RING_CAPACITY);
    let mut panic_log = book.sink("guard-udp-panic", 4);
    let log_actor = book
        .spawn()
        .map_err(|e| format!("cannot start the logging actor: {e}"))?;
    slog::info!(book.logger(), "guard started"; "pid" => pid, "poll_ms" => 2,
        "beat_timeout_ms" => args.beat_timeout_ms, "confirm_window_ms" => args.confirm_window_ms);

    let exits = match exits {
        Ok(l) => Some(l),
        Err(e) => {
            slog::error!(book.logger(), "cannot listen for the runtime's exit-watch connection: \
                without pidfds (Linux older than 5.3) its exit is seen by the heartbeat (60 ms) only; \
                is the page's directory writable by the guard?"; "error" => %e);
            None
        }
    };
    let udp_thread = if args.udp_port != 0 {
        let p = page.clone();
        let p2 = page.clone();
        let t = udp::spawn(
            deathswitch::stop::udp::ListenConfig::new(
                args.udp_port,
                deathswitch::stop::udp::handover_path(&page_path, args.udp_port),
            )
            .with_holders(deathswitch::stop::udp::Holders::of(page.clone())),
            udp_log,
            udp_stops,
            stop.clone(),
            move |r| p.trip(r),
            move || {
                p2.trip(Reason::Fault);
                emit(&mut panic_log, GuardEvent::UdpPanicked);
            },
        )
        .map_err(|e| format!("cannot start the UDP thread: {e}"))?;
        Some(t)
    } else {
        None
    };

    // Best effort: no page faults in the loop.
    let _ = nix::sys::mman::mlockall(
        nix::sys::mman::MlockAllFlags::MCL_CURRENT | nix::sys::mman::MlockAllFlags::MCL_FUTURE,
    );
    slog::info!(
        book.logger(),
        "start-up facts: {}",
        kit::facts::StartupFacts::probe()
    );

    // The poll loop: an actor of the kit at SCHED_FIFO 40, on a 2 ms
    // absolute-deadline ticker.
    let mut poller =
        Poller::new(WireBoard::new(link), settings, pid, loop_log).with_reserve(reserve);
    if let Some(l) = exits {
        poller = poller.with_exit_watch(l);
    }
    let loop_page = page.clone();
    let actor = kit::actor::spawn(
        kit::actor::ActorSpec::new("guard-poll").priority(GUARD_PRIORITY),
        move || {
            // The guard's clock is the page's: the real one.
            let mut ticker = kit::ticker::Ticker::new(POLL_PERIOD_NS);
            // Acquire: pairs with the (SeqCst) store in the signal handler.
            while !signalled.load(Ordering::Acquire) {
                // The 2 ms deadline, or at once when the runtime exits.
                ticker.wait_or_readable(poller.runtime_fd());
                // The poll's one time: every rule and stamp of it.
                poller.poll(&loop_page, ticker.clock().now_ns());
            }
            poller.log_event(GuardEvent::Stopping);
            poller.shutdown(&loop_page);
        },
    )
    .map_err(|e| format!("cannot start the poll thread: {e}"))?;
    let main_log = book.logger().clone();
    for problem in &actor.placement().problems {
        // Once, at start, not on the 2 ms path.
        slog::warn!(
            main_log,
            "{problem}; the guard runs on without real-time priority"
        );
    }
    let _ = actor.join();

    // Release: the UDP and logging threads see it with Acquire.
    stop.store(true, Ordering::Release);
    if let Some(t) = udp_thread {
        t.stop();
    }
    log_actor.stop();
    Ok(())
}
