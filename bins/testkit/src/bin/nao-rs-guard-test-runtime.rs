//! A test-only runtime for the guard's tests and benchmark (never built into
//! a package that is installed; tests find it with
//! `testkit::bin(testkit::TEST_RUNTIME)`): it does what the
//! guard watches a runtime do, and nothing more. It opens the page, registers
//! its pid as the driver, brings the board up with the protocol core's full
//! start-up (retrying every 50 ms for up to 5 s while the board is busy, as
//! the real runtime does), then runs the protocol core's cycle every 12 ms on
//! absolute deadlines and writes its heartbeat after each frame.
//!
//! ```text
//! nao-rs-guard-test-runtime --page PATH --link sim:PATH [--stiffness S] [--never-confirm]
//! ```
//!
//! `--stiffness S` commands every joint at stiffness S (0..1) at its zero
//! position. `--never-confirm` is the "test build that ignores the switch":
//! it beats but never confirms an all-off frame, and its frames ignore a trip.
//! `--freeze registered` registers and then freezes before anything else
//! (a hang before the first beat); `--freeze linked` registers, brings the
//! board up and freezes holding it, before its first beat (a runtime that
//! hangs right after the guard handed it the board). Frozen, it sleeps
//! and ignores SIGTERM; only SIGKILL ends it.
//! `--udp-only PORT` runs only the runtime's UDP stop listener on PORT
//! (the one listener of both processes), for the UDP tests.
//! On SIGTERM it trips `shutdown`, sends one all-off frame and exits. On
//! SIGUSR2 its cycle thread writes through a null pointer: a real
//! segfault, the crash the guard's pidfd must see (a SIGSEGV sent with
//! kill(2) is absorbed by Rust's stack-overflow handler). Every cycle
//! calls `Page::check`, as the runtime does, so it follows a repaired or
//! replaced page.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use deathswitch::{Page, Reason};
use nao_kit::Ticker;
use nao_wire::link::sim::SimLink;
use nao_wire::protocol::cycle::{Cycle, CycleInput};
use nao_wire::protocol::gate::Verdict;
use nao_wire::protocol::startup::{Startup, StartupError};
use nao_wire::{Command, Link, LinkError, JOINTS};
use signal_hook::consts::{SIGTERM, SIGUSR2};

/// A test-only runtime for the guard's tests and benchmark.
#[derive(Parser)]
#[command(name = "nao-rs-guard-test-runtime")]
struct Args {
    /// The page.
    #[arg(long)]
    page: PathBuf,
    /// The virtual robot, `sim:PATH`.
    #[arg(long, required_unless_present = "udp_only")]
    link: Option<String>,
    /// Every joint's stiffness (0..1), at its zero position.
    #[arg(long, default_value_t = 0.0)]
    stiffness: f32,
    /// Beat but never confirm an all-off frame, and ignore a trip.
    #[arg(long)]
    never_confirm: bool,
    /// Freeze before the first beat: `registered` (right after the
    /// registration) or `linked` (after the start-up, holding the board).
    #[arg(long, value_name = "WHEN")]
    freeze: Option<Freeze>,
    /// Run only the UDP stop listener on PORT.
    #[arg(long, value_name = "PORT")]
    udp_only: Option<u16>,
}

/// Where `--freeze` stops the runtime.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Freeze {
    /// Right after the registration.
    Registered,
    /// After the start-up, holding the board.
    Linked,
}

/// Hangs for good (sleeping; SIGKILL ends it).
fn freeze() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nao-rs-guard-test-runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<(), String> {
    // The handlers only set the flags (signal-hook's `flag`: async-signal-safe).
    let stop = Arc::new(AtomicBool::new(false));
    let crash = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(SIGTERM, stop.clone()).map_err(|e| e.to_string())?;
    signal_hook::flag::register(SIGUSR2, crash.clone()).map_err(|e| e.to_string())?;

    let page = Page::open(&a.page).map_err(|e| e.to_string())?;
    page.register_driver(std::process::id());
    if a.freeze == Some(Freeze::Registered) {
        freeze();
    }
    if let Some(port) = a.udp_only {
        let page = std::sync::Arc::new(page);
        let p = page.clone();
        let spec = nao_kit::ActorSpec::new("nao-rs-udp").priority(nao_runtime::UDP_PRIORITY);
        let l = deathswitch::stop::udp::UdpListener::start(
            deathswitch::stop::udp::ListenConfig::new(
                port,
                deathswitch::stop::udp::handover_path(&a.page, port),
            ),
            Default::default(),
            move |r: Reason| {
                p.trip(r);
            },
            |_| {},
            |listening| {
                let actor = nao_kit::actor::spawn_guarded(spec, move || listening.run(), || {})?;
                Ok(move || {
                    let _ = actor.join();
                })
            },
        )
        .map_err(|e| e.to_string())?;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        l.stop();
        return Ok(());
    }
    let link_arg = a.link.unwrap_or_default();
    let path = nao_wire::link::sim::sim_path(&link_arg)
        .ok_or(format!("--link {link_arg:?}: use sim:PATH"))?;
    let mut link = SimLink::new(path);

    // The board: retry every 50 ms for up to 5 s while it is busy.
    let started = Instant::now();
    let identity = loop {
        match Startup::run(&mut link) {
            Ok(id) => break id,
            Err(StartupError::Link {
                error: LinkError::Busy,
                ..
            })
            | Err(StartupError::Link {
                error: LinkError::NoDevice,
                ..
            }) if started.elapsed() < Duration::from_secs(5) => {
                link.close();
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("start-up: {e}")),
        }
    };
    if a.freeze == Some(Freeze::Linked) {
        freeze();
    }
    let mut cycle = Cycle::from_identity(&identity, &[10, 11]);
    let cmd = Command {
        stiffness: [a.stiffness; JOINTS],
        ..Command::default()
    };
    let mut ticker = Ticker::new(nao_runtime::PERIOD_NS);
    loop {
        ticker.wait();
        if crash.load(Ordering::SeqCst) {
            // SAFETY: none, on purpose: the test's crash (SIGSEGV).
            unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
        }
        page.check();
        let stopping = stop.load(Ordering::SeqCst);
        if stopping {
            page.trip(Reason::Shutdown);
        }
        let tripped = !a.never_confirm && page.is_tripped();
        let input = CycleInput {
            command: Some(&cmd),
            verdict: if tripped {
                &Verdict::LIMP
            } else {
                &Verdict::AWAKE
            },
        };
        let out = cycle.run(&mut link, &input, deathswitch::now_ns());
        let all_off = out.all_off && !a.never_confirm;
        page.write_heartbeat(out.k, deathswitch::now_ns(), all_off);
        if stopping {
            link.close();
            return Ok(());
        }
    }
}
