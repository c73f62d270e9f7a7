//! `nao-rs record`: runs the runtime over a `RecordingLink` and writes every
//! USB call together with the inputs (`cycle`, `command`, `silence`, `trip`,
//! `rearm`, `wake`, and the settings `accepted`, `switch`), so that `nao-rs replay`
//! drives the same code through the same session.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;

use nao_runtime::controller::{self, Controller, Idle, Stand};
use nao_runtime::{wake, Config, CycleHook, Runtime, Switch};
use nao_wire::link::Link;
use nao_wire::recording::record_link::RecordingLink;
use nao_wire::step::Observed;
use nao_wire::Command;

use crate::run::{catch_stop_signals, open_link, open_page, stop_on_signals, ControllerKind};

/// Options of `nao-rs record`.
#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// `sim:PATH` (the virtual robot) or `usb`.
    #[arg(long)]
    pub link: String,
    /// The recording to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Stop after this many cycles (else on SIGINT/SIGTERM).
    #[arg(long)]
    pub cycles: Option<u64>,
    /// What commands the body while recording (`lola` is not offered).
    #[arg(long, value_enum, default_value = "stand")]
    pub controller: ControllerKind,
    /// The death switch page; default: a private page in a temp dir.
    #[arg(long)]
    pub page: Option<PathBuf>,
    /// Start a private page armed (a fresh page starts tripped) and, on the
    /// virtual robot (`sim:`), wake it once at start (every start is limp
    /// until a person's wake; the person recording is that person). Ignored
    /// with --page: re-arming a real page is a person's `naoctl rearm`.
    #[arg(long)]
    pub armed: bool,
    /// The wake socket (default: wake.sock next to the page).
    #[arg(long)]
    pub wake_socket: Option<PathBuf>,
    /// Accepted motor board configuration versions.
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub accepted: Vec<u8>,
}

type Rec = RecordingLink<Box<dyn Link>, BufWriter<File>>;

/// Writes the input lines before each cycle's calls.
#[derive(Default)]
pub struct InputRecorder {
    last_command: Option<Command>,
    tripped: bool,
    /// The page's trip count at the last cycle (`None` before the first).
    trip_count: Option<u64>,
    /// The first cycle's time, whole ms on the runtime's clock.
    first_ms: Option<u64>,
}

impl CycleHook<Rec> for InputRecorder {
    fn before_startup(&mut self, link: &mut Rec, accepted: &[u8], armed: bool) {
        let _ = link.accepted(accepted);
        let _ = link.switch(armed);
        self.tripped = !armed;
    }

    fn before_cycle(&mut self, link: &mut Rec, seen: &Observed<'_>) {
        // ms since the session's first cycle (the step's time is the
        // runtime's clock; its rules judge whole ms, so differences of
        // these are the differences the run judged).
        let now_ms = seen.input.now_ns / 1_000_000;
        let t_ms = now_ms.saturating_sub(*self.first_ms.get_or_insert(now_ms));
        let _ = link.cycle(seen.k, t_ms);
        match (seen.input.command, &self.last_command) {
            (Some(c), Some(last)) if c == last => {}
            (Some(c), _) => {
                let _ = link.command(c);
                self.last_command = Some(*c);
            }
            (None, Some(_)) => {
                let _ = link.silence();
                self.last_command = None;
            }
            (None, None) => {}
        }
        let tripped = !seen.switch.armed;
        let trip_count = seen.switch.trip_count;
        let reason = seen.switch.reason.unwrap_or(deathswitch::Reason::PageLost);
        // No trip unseen: a trip count that moved while the switch reads as
        // it did is a trip and a re-arm between two frames; the recording
        // says so with both lines, so replay's switch counts it too.
        let counted = self.trip_count.is_some_and(|c| c != trip_count);
        match (self.tripped, tripped) {
            (false, true) => {
                let _ = link.trip(reason);
            }
            (true, false) => {
                let _ = link.rearm();
            }
            // Re-armed before the frame: the trip's reason is gone.
            (false, false) if counted => {
                let _ = link.trip(None);
                let _ = link.rearm();
            }
            (true, true) if counted => {
                let _ = link.rearm();
                let _ = link.trip(reason);
            }
            _ => {}
        }
        // A wake in the generation read (or one the switch uses up while
        // tripped): replay gives a `wake` line the generation of its switch
        // as it stands, so a wake of another generation (stale, used up by
        // the gate) is not written.
        if let Some(g) = seen.input.wake {
            if tripped || Some(g) == seen.switch.wake_generation() {
                let _ = link.wake();
            }
        }
        self.tripped = tripped;
        self.trip_count = Some(trip_count);
    }
}

/// Runs `nao-rs record`.
pub fn main(args: RecordArgs) -> Result<(), String> {
    nao_wire::protocol::handshake::check_accepted(&args.accepted)
        .map_err(|e| format!("--accepted: {e}"))?;
    let signals = catch_stop_signals()?;
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let page_path = args
        .page
        .clone()
        .unwrap_or_else(|| tmp.path().join("deathswitch"));
    let (page, _) = open_page(Some(&page_path))?;
    if args.page.is_none() && args.armed {
        page.rearm();
    }
    let board: Arc<dyn Switch> = page;
    let wake_path = args
        .wake_socket
        .clone()
        .unwrap_or_else(|| page_path.with_file_name("wake.sock"));
    let bound_wake = wake::WakeListener::bind(&wake_path).map_err(|e| e.to_string())?;
    let file = File::create(&args.out)
        .map_err(|e| format!("cannot create the recording {}: {e}", args.out.display()))?;
    let link = RecordingLink::new(open_link(&args.link)?, BufWriter::new(file))
        .map_err(|e| format!("cannot write the recording {}: {e}", args.out.display()))?;
    let config = Config {
        cycle_priority: None,
        udp_port: None,
        accepted: args.accepted.clone(),
        max_cycles: args.cycles,
        ..Config::default()
    };
    let (rt, mut io) = Runtime::start_with_hook(link, board, config, InputRecorder::default())
        .map_err(|e| e.to_string())?;
    stop_on_signals(signals, rt.handle());
    let _wake = bound_wake
        .start(rt.handle().wake_signal().clone(), rt.logger().clone())
        .map_err(|e| format!("cannot start the wake listener: {e}"))?;
    if args.page.is_none() && args.armed && args.link.starts_with("sim:") {
        rt.handle().wake().map_err(|e| e.to_string())?;
        println!(
            "woke the private session for you at start (every start is limp until a person's wake)"
        );
    } else {
        println!(
            "limp until a person's wake: nao-rs wake --page {} --socket {}",
            page_path.display(),
            wake_path.display()
        );
    }
    let kind = args.controller;
    let ctl = std::thread::spawn(move || {
        let mut c: Box<dyn Controller> = match kind {
            ControllerKind::Stand => Box::new(Stand::new()),
            _ => Box::new(Idle),
        };
        controller::run(&mut io, c.as_mut());
    });
    let (link, summary) = rt.wait();
    let _ = ctl.join();
    let link = link.ok_or("the cycle panicked; the recording is incomplete")?;
    link.finish()
        .map_err(|e| format!("writing {} failed: {e}", args.out.display()))?;
    println!(
        "recorded {} cycles to {}",
        summary.cycles,
        args.out.display()
    );
    Ok(())
}
