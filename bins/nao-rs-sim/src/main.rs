//! The virtual robot: a chest board and every board behind it, over a Unix socket.
//!
//! `nao-rs-sim --socket PATH [settings] [start faults]` serves (or
//! `--functionfs DIR`: the same board as a USB device);
//! `nao-rs-sim ctl --socket PATH <command>` talks to a running one.
//! See `docs/sim.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use nao_rs_sim::ctl::{self, CtlCommand};
use nao_rs_sim::device::Device;
use nao_rs_sim::functionfs::{self, FfsPaths};
use nao_rs_sim::server::{self, ServerPaths};
use nao_rs_sim::settings::BoardSettings;

#[derive(Parser, Debug)]
#[command(
    name = "nao-rs-sim",
    about = "The virtual NAO V6 robot: the chest board and every board behind it, over a Unix socket",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    serve: Serve,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Send a control command to a running simulator and print its answer.
    Ctl(CtlArgs),
    /// Hold the board busy: open it, claim interface 0, print `claimed`,
    /// keep the claim until killed (or for --ms). For busy/takeover tests.
    Hold(HoldArgs),
}

#[derive(Args, Debug)]
struct HoldArgs {
    /// The simulator's USB socket.
    #[arg(long)]
    socket: PathBuf,
    /// Release after this many ms (default: hold until killed).
    #[arg(long)]
    ms: Option<u64>,
}

#[derive(Args, Debug)]
struct CtlArgs {
    /// The simulator's USB socket (its control socket is PATH.ctl).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The control socket, if not PATH.ctl.
    #[arg(long)]
    ctl: Option<PathBuf>,
    /// The command: drop N | corrupt N | stall MS | unplug | replug | button [MS] |
    /// heat JOINT [DEG] | fault JOINT | overcurrent [MA] [MS] | clear | status |
    /// posture standing|sitting|lying-back|lying-front | bumper left|right|both|none |
    /// imu-shake MRAD_S [MS] | joint-fault JOINT reversed|offset:RAD|stuck|high-current:MA|clear
    #[arg(required = true, num_args = 1.., trailing_var_arg = true)]
    words: Vec<String>,
}

#[derive(Args, Debug)]
struct Serve {
    /// The USB socket to listen on (`--link sim:PATH` in the programs).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The control socket (default: PATH.ctl; with --functionfs: none unless given).
    #[arg(long)]
    ctl: Option<PathBuf>,
    /// Serve as a USB device on this mounted FunctionFS instance instead of
    /// a socket (the virtual head; see docs/virtual-head.md).
    #[arg(long, value_name = "DIR", conflicts_with = "socket")]
    functionfs: Option<PathBuf>,
    /// Write one JSON line per frame received to FILE.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print nothing at start.
    #[arg(long)]
    quiet: bool,
    /// Every board's configuration version (default 10).
    #[arg(long)]
    versions: Option<String>,
    /// One board's configuration version: ADDR=V (e.g. 0x13=11); repeatable.
    #[arg(long = "version", value_name = "ADDR=V")]
    version: Vec<String>,
    /// A board answers the handshake only from its Nth request: ADDR=N.
    #[arg(long, value_name = "ADDR=N")]
    late: Vec<String>,
    /// A board never answers the handshake: ADDR.
    #[arg(long, value_name = "ADDR")]
    never: Vec<String>,
    /// Versions the trace's max_stiffness_accepted counts as accepted (default 10).
    #[arg(long, value_name = "V[,V...]")]
    accepted: Option<String>,
    /// The body id in the preference block (ASCII, at most 20).
    #[arg(long)]
    body_id: Option<String>,
    /// A joint's zero position: JOINT=COUNT (index or name); repeatable.
    #[arg(long, value_name = "JOINT=COUNT")]
    zero: Vec<String>,
    /// Serve this 4,635-byte preference block as it is.
    #[arg(long, value_name = "FILE")]
    prefs: Option<String>,
    /// How the robot is placed at start: standing (default), sitting,
    /// lying-back or lying-front (the IMU and the foot pressure follow;
    /// `ctl posture` changes it).
    #[arg(long, value_name = "POSTURE")]
    posture: Option<String>,
    /// Start fault: drop the answers to the first N frames.
    #[arg(long, value_name = "N")]
    drop: Option<u32>,
    /// Start fault: corrupt (bad CRC) the answers to the first N frames.
    #[arg(long, value_name = "N")]
    corrupt: Option<u32>,
    /// Start fault: no answers for the first MS ms.
    #[arg(long, value_name = "MS")]
    stall: Option<u64>,
    /// Start unplugged (until `ctl replug`).
    #[arg(long)]
    unplugged: bool,
    /// Start fault: joint reports 95 degC (JOINT or JOINT=DEG); repeatable.
    #[arg(long, value_name = "JOINT[=DEG]")]
    heat: Vec<String>,
    /// Start fault: joint reports status bit 0; repeatable.
    #[arg(long, value_name = "JOINT")]
    fault: Vec<String>,
    /// Start fault: the battery reports MA mA (e.g. 5200).
    #[arg(long, value_name = "MA")]
    overcurrent: Option<i16>,
    /// Start fault: any control command, e.g. "button 500"; repeatable.
    #[arg(long, value_name = "COMMAND")]
    inject: Vec<String>,
}

fn start_faults(s: &Serve) -> Result<Vec<CtlCommand>, String> {
    let mut out = Vec::new();
    if let Some(p) = &s.posture {
        out.push(CtlCommand::parse(&["posture", p]).map_err(|e| format!("--posture {p}: {e}"))?);
    }
    if let Some(n) = s.drop {
        out.push(CtlCommand::Drop(n));
    }
    if let Some(n) = s.corrupt {
        out.push(CtlCommand::Corrupt(n));
    }
    if let Some(ms) = s.stall {
        out.push(CtlCommand::Stall(ms));
    }
    if s.unplugged {
        out.push(CtlCommand::Unplug);
    }
    for h in &s.heat {
        let words: Vec<&str> = std::iter::once("heat").chain(h.split('=')).collect();
        out.push(CtlCommand::parse(&words).map_err(|e| format!("--heat {h}: {e}"))?);
    }
    for f in &s.fault {
        out.push(CtlCommand::parse(&["fault", f]).map_err(|e| format!("--fault {f}: {e}"))?);
    }
    if let Some(ma) = s.overcurrent {
        out.push(CtlCommand::Overcurrent(ma, None));
    }
    for i in &s.inject {
        out.push(CtlCommand::parse_line(i).map_err(|e| format!("--inject {i:?}: {e}"))?);
    }
    Ok(out)
}

fn run_serve(s: Serve) -> Result<(), String> {
    if s.socket.is_none() && s.functionfs.is_none() {
        return Err(
            "--socket PATH (the programs then use --link sim:PATH) or --functionfs DIR \
             (the programs then use --link usb) is required"
                .into(),
        );
    }
    let settings = BoardSettings {
        versions: s.versions.clone(),
        version: s.version.clone(),
        late: s.late.clone(),
        never: s.never.clone(),
        accepted: s.accepted.clone(),
        body_id: s.body_id.clone(),
        zero: s.zero.clone(),
        prefs: s.prefs.clone(),
    };
    let (cfg, prefs, warning) = settings.build()?;
    if let Some(w) = warning {
        eprintln!("nao-rs-sim: warning: {w}");
    }
    let faults = start_faults(&s)?;
    let mut device = Device::new(cfg, prefs);
    let now = server::now_ns();
    for f in faults {
        device.control(f, now);
    }
    if let Some(dir) = s.functionfs.clone() {
        let paths = FfsPaths {
            dir,
            ctl: s.ctl.clone(),
            trace: s.trace.clone(),
            quiet: s.quiet,
        };
        return functionfs::serve(device, &paths);
    }
    let Some(socket) = s.socket.clone() else {
        return Err("--socket PATH is required".into());
    };
    let paths = ServerPaths {
        ctl: s
            .ctl
            .clone()
            .unwrap_or_else(|| ctl::default_ctl_path(&socket)),
        socket,
        trace: s.trace.clone(),
        quiet: s.quiet,
    };
    remove_on_signals(vec![paths.socket.clone(), paths.ctl.clone()])
        .map_err(|e| format!("cannot install the SIGTERM/SIGINT/SIGHUP handlers: {e}"))?;
    server::serve(device, &paths).map_err(|e| e.to_string())
}

/// SIGTERM, SIGINT and SIGHUP remove `files` (the sockets) and end the
/// process (exit 0): `signal-hook` records the signal, one thread acts on it.
fn remove_on_signals(files: Vec<PathBuf>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("sim-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                for f in &files {
                    let _ = std::fs::remove_file(f);
                }
                std::process::exit(0);
            }
        })?;
    Ok(())
}

fn run_ctl(c: CtlArgs) -> Result<(), String> {
    let path = match (&c.ctl, &c.socket) {
        (Some(p), _) => p.clone(),
        (None, Some(s)) => ctl::default_ctl_path(s),
        (None, None) => return Err("ctl: give --socket PATH (or --ctl PATH)".into()),
    };
    let line = c.words.join(" ");
    CtlCommand::parse_line(&line)?;
    let answer = ctl::send(&path, &line).map_err(|e| e.to_string())?;
    println!("{answer}");
    if answer.starts_with("error") {
        return Err(format!("the simulator refused {line:?}"));
    }
    Ok(())
}

fn run_hold(h: HoldArgs) -> Result<(), String> {
    use nao_wire::link::{sim::SimLink, Link, PRODUCT_ID, VENDOR_ID};
    use std::io::Write;
    let mut link = SimLink::new(&h.socket);
    let at = h.socket.display();
    link.open(VENDOR_ID, PRODUCT_ID)
        .map_err(|e| format!("hold: open {at}: {e}"))?;
    link.claim_interface(0)
        .map_err(|e| format!("hold: claim interface 0 on {at}: {e}"))?;
    println!("claimed");
    let _ = std::io::stdout().flush();
    match h.ms {
        Some(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        None => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
    }
    link.close();
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Some(Sub::Ctl(c)) => run_ctl(c),
        Some(Sub::Hold(h)) => run_hold(h),
        None => run_serve(cli.serve),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nao-rs-sim: {e}");
            ExitCode::from(2)
        }
    }
}
