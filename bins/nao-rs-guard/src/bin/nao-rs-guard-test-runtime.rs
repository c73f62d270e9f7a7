//! A test-only runtime for the guard's tests and benchmark: it does what the
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
use std::time::{Duration, Instant};

use deathswitch::{Page, Reason};
use nao_actors::kit::Ticker;
use nao_wire::link::sim::SimLink;
use nao_wire::protocol::cycle::{Cycle, CycleInput};
use nao_wire::protocol::startup::{Startup, StartupError};
use nao_wire::{Command, Link, LinkError, JOINTS};

static STOP: AtomicBool = AtomicBool::new(false);
static CRASH: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr2(_: libc::c_int) {
    // Release: pairs with the Acquire load in the cycle loop.
    CRASH.store(true, Ordering::Release);
}

extern "C" fn on_term(_: libc::c_int) {
    // Release: pairs with the Acquire load in the cycle loop.
    STOP.store(true, Ordering::Release);
}

struct Args {
    page: PathBuf,
    link: String,
    stiffness: f32,
    never_confirm: bool,
    udp_only: Option<u16>,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        page: PathBuf::new(),
        link: String::new(),
        stiffness: 0.0,
        never_confirm: false,
        udp_only: None,
    };
    while let Some(k) = it.next() {
        match k.as_str() {
            "--page" => a.page = it.next().ok_or("--page needs a path")?.into(),
            "--link" => a.link = it.next().ok_or("--link needs sim:PATH")?,
            "--stiffness" => {
                let v = it.next().ok_or("--stiffness needs a number")?;
                a.stiffness = v
                    .parse()
                    .map_err(|_| format!("--stiffness {v:?}: not a number"))?;
            }
            "--never-confirm" => a.never_confirm = true,
            "--udp-only" => {
                let v = it.next().ok_or("--udp-only needs a port")?;
                a.udp_only = Some(
                    v.parse()
                        .map_err(|_| format!("--udp-only {v:?}: not a port"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.page.as_os_str().is_empty() || (a.link.is_empty() && a.udp_only.is_none()) {
        return Err("usage: nao-rs-guard-test-runtime --page PATH --link sim:PATH [--stiffness S] [--never-confirm]".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nao-rs-guard-test-runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let a = parse()?;
    use nix::sys::signal::Signal;
    for (sig, handler) in [
        (Signal::SIGTERM, on_term as extern "C" fn(libc::c_int)),
        (Signal::SIGUSR2, on_usr2),
    ] {
        let act = nix::sys::signal::SigAction::new(
            nix::sys::signal::SigHandler::Handler(handler),
            nix::sys::signal::SaFlags::empty(),
            nix::sys::signal::SigSet::empty(),
        );
        // SAFETY: each handler only stores to an atomic (async-signal-safe).
        unsafe { nix::sys::signal::sigaction(sig, &act) }.map_err(|e| e.to_string())?;
    }

    let page = Page::open(&a.page).map_err(|e| e.to_string())?;
    page.register_driver(std::process::id());
    if let Some(port) = a.udp_only {
        let page = std::sync::Arc::new(page);
        let p = page.clone();
        let l = nao_actors::runtime::udp::UdpListener::start_named(
            "nao-rs-udp",
            port,
            Default::default(),
            Some(nao_actors::runtime::UDP_PRIORITY),
            move || {
                p.trip(Reason::Udp);
            },
            |_| {},
            || {},
        )
        .map_err(|e| e.to_string())?;
        // Acquire: pairs with the Release in the SIGTERM handler.
        while !STOP.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
        }
        l.stop();
        return Ok(());
    }
    let path = nao_wire::link::sim::sim_path(&a.link)
        .ok_or(format!("--link {:?}: use sim:PATH", a.link))?;
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
    let mut cycle = Cycle::from_identity(&identity, &[10, 11]);
    let cmd = Command {
        stiffness: [a.stiffness; JOINTS],
        ..Command::default()
    };
    let mut ticker = Ticker::new(nao_actors::runtime::PERIOD_NS);
    loop {
        ticker.wait();
        // Acquire: pairs with the Release in the SIGUSR2 handler.
        if CRASH.load(Ordering::Acquire) {
            // SAFETY: none, on purpose: the test's crash (SIGSEGV).
            unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
        }
        page.check();
        let stopping = STOP.load(Ordering::Acquire);
        if stopping {
            page.trip(Reason::Shutdown);
        }
        let tripped = !a.never_confirm && page.is_tripped();
        let input = CycleInput {
            command: Some(&cmd),
            tripped,
            page_lost: false,
            trip_count: if a.never_confirm {
                0
            } else {
                page.trip_count()
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
