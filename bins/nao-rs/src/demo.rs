//! `nao-rs demo`: the virtual robot, the guard and the runtime with the
//! `stand` controller, on private paths in a temp dir, with a live status
//! line and the commands to try.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `nao-rs demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// End by itself after this many seconds.
    #[arg(long)]
    pub seconds: Option<u64>,
    /// The UDP stop port.
    #[arg(long, default_value_t = deathswitch::stop::PORT)]
    pub udp_port: u16,
    /// Leave the private page tripped at start and do not wake the robot
    /// (it stays limp until `naoctl rearm` and `nao-rs wake`).
    #[arg(long)]
    pub start_tripped: bool,
}

/// A child process, stopped with SIGTERM (then SIGKILL after 2 s) on drop.
struct Proc {
    name: &'static str,
    child: Child,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command) -> Result<Proc, String> {
        // Own process group: a Ctrl-C in the terminal reaches the demo
        // only, which stops the children in order.
        cmd.process_group(0).stdin(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Proc { name, child })
    }

    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "nao-rs demo: {} did not stop on SIGTERM; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.exited() {
            self.stop();
        }
    }
}

fn sibling(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(name);
    p.exists().then_some(p)
}

fn status_text(path: &Path) -> Option<String> {
    let s = nao_runtime::status_file::StatusFile::read(path)?;
    let switch = if s.tripped {
        format!("TRIPPED ({})", s.reason.as_deref().unwrap_or("?"))
    } else if s.limp {
        "armed, limp: wake it".to_string()
    } else {
        "armed".to_string()
    };
    Some(format!(
        "cycle {:>6} | lateness {:>5} us (max {:>5}) | switch {:<24} | stiffness max {:>4}/1000{}",
        s.cycle,
        s.lateness_us,
        s.max_lateness_us,
        switch,
        s.max_stiffness,
        if s.flags.is_empty() {
            String::new()
        } else {
            format!(" | {}", s.flags.join(","))
        }
    ))
}

/// Waits (up to 10 s) for the runtime's wake socket and its registration
/// in the page (the socket is bound before the runtime registers: a page
/// read in between has no generation yet), then wakes in the page's
/// generation; returns it.
fn wake_once(page: &deathswitch::Page, socket: &Path, runtime: &mut Proc) -> Result<u64, String> {
    let t0 = Instant::now();
    let unregistered = || {
        let s = page.snapshot();
        s.armed && s.wake_generation().is_none()
    };
    while !socket.exists() || unregistered() {
        if runtime.exited() || t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("no wake socket at {}", socket.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let g = page
        .snapshot()
        .wake_generation()
        .ok_or("the switch is tripped; re-arm first with `naoctl rearm`")?;
    nao_runtime::wake::send(socket, g).map_err(|e| e.to_string())?;
    Ok(g)
}

/// Runs `nao-rs demo`.
pub fn main(args: DemoArgs) -> Result<(), String> {
    let mut signals = crate::run::catch_stop_signals()?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            s2.store(true, Ordering::SeqCst);
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("nao-rs-demo-")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let d = dir.path();
    let socket = d.join("sim.sock");
    let page_path = d.join("deathswitch");
    let wake = d.join("wake.sock");
    let status = d.join("status.json");
    let me = std::env::current_exe().map_err(|e| format!("cannot find nao-rs itself: {e}"))?;
    let sim_exe = sibling("nao-rs-sim").ok_or_else(|| {
        format!(
            "nao-rs-sim is not next to {}: build it with `cargo build --bin nao-rs-sim` \
             (or run `cargo build` for the whole workspace)",
            me.display()
        )
    })?;

    // The page: created tripped (boot); the person starting the demo arms
    // this private page unless --start-tripped.
    let page = deathswitch::Page::open(&page_path).map_err(|e| e.to_string())?;
    if !args.start_tripped {
        page.rearm();
    }

    let mut sim = Proc::spawn(
        "nao-rs-sim",
        Command::new(&sim_exe)
            .arg("--socket")
            .arg(&socket)
            .arg("--trace")
            .arg(d.join("trace.jsonl"))
            .args(["--versions", "10"])
            .stderr(Stdio::null()),
    )?;
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if sim.exited() || t0.elapsed() > Duration::from_secs(10) {
            return Err("nao-rs-sim did not start".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let link = format!("sim:{}", socket.display());
    let log = std::fs::File::create(d.join("runtime.log")).map_err(|e| e.to_string())?;
    let mut runtime = Proc::spawn(
        "nao-rs run",
        Command::new(&me)
            .args(["run", "--link", &link, "--controller", "stand"])
            .args(["--udp-port", &args.udp_port.to_string()])
            .arg("--page")
            .arg(&page_path)
            .arg("--wake-socket")
            .arg(&wake)
            .arg("--status-file")
            .arg(&status)
            .env("NAO_RS_DEATHSWITCH", &page_path)
            .stderr(log),
    )?;
    let guard = match sibling("nao-rs-guard") {
        Some(g) => {
            let glog = std::fs::File::create(d.join("guard.log")).map_err(|e| e.to_string())?;
            Some(Proc::spawn(
                "nao-rs-guard",
                Command::new(g)
                    .arg("--page")
                    .arg(&page_path)
                    .args(["--link", &link, "--udp-port", &args.udp_port.to_string()])
                    .env("NAO_RS_DEATHSWITCH", &page_path)
                    .stderr(glog),
            )?)
        }
        None => {
            println!("nao-rs-guard is not next to nao-rs: running without the guard (build it with `cargo build --bin nao-rs-guard`)");
            None
        }
    };
    let naoctl = sibling("naoctl").map_or("naoctl".to_string(), |p| p.display().to_string());
    let pfx = format!("NAO_RS_DEATHSWITCH={}", page_path.display());
    println!(
        "nao-rs demo: the virtual robot, {}the runtime with `stand`, in {}",
        if guard.is_some() { "the guard, " } else { "" },
        d.display()
    );
    println!("Try, in another terminal:");
    println!("  {pfx} {naoctl} status");
    println!("  {pfx} {naoctl} stop            # trip: every frame all-off");
    println!(
        "  cargo nao-rs stop 127.0.0.1 --port {}   # the UDP stop",
        args.udp_port
    );
    println!("  {pfx} {naoctl} rearm           # re-arm: the robot stays limp");
    println!(
        "  {pfx} NAO_RS_WAKE_SOCKET={} {} wake   # wake: it stands up again",
        wake.display(),
        me.display()
    );
    println!(
        "  {} ctl --socket {} button       # the chest button",
        sim_exe.display(),
        socket.display()
    );
    println!(
        "Logs: {}/runtime.log{}. Ctrl-C stops everything.",
        d.display(),
        if guard.is_some() { ", guard.log" } else { "" }
    );

    if !args.start_tripped {
        // Every start of the runtime is limp until a person's wake; the
        // person who started the demo is that person.
        match wake_once(&page, &wake, &mut runtime) {
            Ok(g) => println!(
                "nao-rs demo: woke the robot for you (as `nao-rs wake` does, generation {g}): \
                 every start of the runtime is limp until a person's wake"
            ),
            Err(e) => println!("nao-rs demo: could not wake the robot for you: {e}"),
        }
    }

    let t0 = Instant::now();
    let mut out = std::io::stdout();
    let mut guard = guard;
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if args
            .seconds
            .is_some_and(|s| t0.elapsed() >= Duration::from_secs(s))
        {
            break;
        }
        if runtime.exited() {
            println!();
            println!(
                "nao-rs demo: the runtime ended (see {}/runtime.log)",
                d.display()
            );
            break;
        }
        if let Some(line) = status_text(&status) {
            let _ = write!(out, "\r{line}  ");
            let _ = out.flush();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!();
    // Stop in order: the runtime (trips shutdown, a last all-off frame),
    // then the guard, then the robot.
    runtime.stop();
    if let Some(g) = guard.as_mut() {
        g.stop();
    }
    sim.stop();
    let reason = page.reason().map(|r| r.name()).unwrap_or("armed");
    println!("nao-rs demo: stopped (switch: {reason})");
    Ok(())
}
