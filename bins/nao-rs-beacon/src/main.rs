//! `nao-rs-beacon`: the robot's status beacon and network wake
//! (`docs/app.md`, "The beacon service").
//!
//! A small service of its own (its own systemd unit, started after the
//! guard), so a robot program's crash or hang cannot silence it. Every
//! 1/`NAO_RS_BEACON_HZ` s it reads the death switch page (read-only:
//! `deathswitch::inspect`, never a write) and the runtime's status file,
//! and sends one beacon datagram to the operators. When a team key is
//! there it also listens for the network wake on UDP 7703 and passes a
//! verified one to the runtime's wake socket as `wake <generation>`.
//! The rules are in `service.rs`; this file moves data.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use nao_kit::clock::{Clock, MonotonicClock};
use nao_kit::ticker::Ticker;
use nao_rs_beacon::auth::{self, TeamKey};
use nao_rs_beacon::format;
use nao_runtime::status_file::{self, StatusFile};
use nao_runtime::wake;

mod service;

/// How often the broadcast mode lists the interfaces again, ns.
const LIST_EVERY_NS: u64 = 5_000_000_000;
use service::{BeaconSettings, Mode, PageView, WakeVerdict};

/// The robot's status beacon and network wake. Settings come from the
/// environment (`NAO_RS_BEACON`, `NAO_RS_BEACON_TARGETS`,
/// `NAO_RS_BEACON_HZ`, `NAO_RS_BEACON_PORT`, `NAO_RS_WAKE_PORT`,
/// `NAO_RS_TEAM_KEY`, `NAO_RS_ROBOT_NAME`, `NAO_RS_BODY_ID`; docs/app.md).
#[derive(Parser, Debug)]
#[command(name = "nao-rs-beacon", version, about)]
struct Cli {
    /// The death switch page (default `$NAO_RS_DEATHSWITCH`, else
    /// /run/nao-rs/deathswitch).
    #[arg(long)]
    page: Option<PathBuf>,
    /// The runtime's status file (default `$NAO_RS_STATUS`, else
    /// status.json next to the page).
    #[arg(long)]
    status: Option<PathBuf>,
    /// The runtime's wake socket (default `$NAO_RS_WAKE_SOCKET`, else
    /// wake.sock next to the page).
    #[arg(long)]
    wake_socket: Option<PathBuf>,
}

fn log(msg: std::fmt::Arguments<'_>) {
    eprintln!("nao-rs-beacon: {msg}");
}

/// The page as it is now; a page that cannot be read reads tripped
/// `page-lost` with the damage named.
fn read_page(path: &Path) -> PageView {
    match deathswitch::inspect(path) {
        Ok(ins) => PageView::new(ins.snapshot, ins.damage),
        Err(_) => PageView::new(
            deathswitch::Snapshot::default(),
            Some(deathswitch::Damage::Path {
                errno: libc::ENOENT,
            }),
        ),
    }
}

fn read_status(path: &Path) -> Option<StatusFile> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// This start's nonce: 8 random bytes from the kernel (`getrandom`), never
/// 0. The beacon's seal binds it with `seq` (which counts from 0 at every
/// start), so the app can tell a restart from a replay.
fn start_nonce() -> Result<u64, String> {
    let mut b = [0u8; 8];
    for _ in 0..8 {
        // SAFETY: `b` is a valid, writable 8-byte buffer; getrandom only
        // writes into it.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        let v = u64::from_ne_bytes(b);
        if n == 8 && v != 0 {
            return Ok(v);
        }
    }
    Err(format!(
        "no random start nonce from the kernel (getrandom): {}",
        std::io::Error::last_os_error()
    ))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "nao".into())
}

/// Where this tick's beacon goes.
fn targets(settings: &BeaconSettings, broadcasts: &[Ipv4Addr]) -> Vec<SocketAddr> {
    let mut all = settings.targets.clone();
    if settings.mode == Mode::Broadcast {
        for b in broadcasts {
            let t = SocketAddr::from((*b, settings.beacon_port));
            if !all.contains(&t) {
                all.push(t);
            }
        }
    }
    all
}

/// Logs refused wakes, at most [`service::RefusalWindow::BURST`] lines a
/// second of the beacon's clock; the rest are counted and the count told
/// with the next line (a flood of bogus wakes cannot fill the journal).
struct RefusalLog<C: Clock> {
    clock: C,
    window: service::RefusalWindow,
}

impl<C: Clock> RefusalLog<C> {
    fn refused(&mut self, from: SocketAddr, why: &dyn std::fmt::Display) {
        let Some(quiet) = self.window.refused(self.clock.now_ns()) else {
            return;
        };
        let more = match quiet {
            0 => String::new(),
            n => format!(" ({n} more refused and not logged before this one)"),
        };
        log(format_args!("network wake from {from}: {why}{more}"));
    }
}

/// The network wake: one datagram at a time, bounded work each.
fn wake_loop(
    sock: UdpSocket,
    key: TeamKey,
    body_id: String,
    page: PathBuf,
    wake_socket: PathBuf,
    stop: Arc<AtomicBool>,
) {
    let mut buf = [0u8; 2048];
    let mut refusals = RefusalLog {
        clock: MonotonicClock,
        window: service::RefusalWindow::default(),
    };
    // Acquire: pairs with the signal handler's store.
    while !stop.load(Ordering::Acquire) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                log(format_args!("network wake socket: {e}; retrying in 1 s"));
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        let view = read_page(&page);
        match service::judge_wake(Some(&key), &buf[..n], &body_id, &view) {
            WakeVerdict::Pass { generation, key_id } => {
                match wake::send(&wake_socket, generation) {
                    Ok(()) => log(format_args!(
                        "woken by {from} (key {key_id}) at wake generation {generation}"
                    )),
                    Err(e) => log(format_args!(
                    "a wake from {from} (key {key_id}) verified, but the runtime's wake socket {} \
                     did not take it: {e}. Is the runtime running?",
                    wake_socket.display()
                )),
                }
            }
            WakeVerdict::Refuse(r) => refusals.refused(from, &r),
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    log(format_args!(
        "start-up facts: {}",
        nao_kit::facts::StartupFacts::probe()
    ));
    let settings = BeaconSettings::from_vars(|k| std::env::var(k).ok(), &hostname())
        .map_err(|e| e.to_string())?;
    let page = cli.page.unwrap_or_else(deathswitch::default_path);
    let status = cli
        .status
        .or_else(|| status_file::default_path(Some(&page)))
        .unwrap_or_else(|| PathBuf::from("status.json"));
    let wake_socket = cli.wake_socket.unwrap_or_else(|| wake::socket_path(&page));

    // No signal but TERM and INT ends the service.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("cannot install the handler of signal {sig}: {e}"))?;
    }
    for sig in [
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGQUIT,
        libc::SIGALRM,
        libc::SIGPIPE,
    ] {
        // SAFETY: SIG_IGN for a catchable signal; no handler code runs.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }

    let key = match TeamKey::read(&settings.key_path) {
        _ if !settings.key_path.exists() => {
            log(format_args!(
                "no team key at {}: network wake is off (docs/app.md says how to make one)",
                settings.key_path.display()
            ));
            None
        }
        Ok(k) => {
            log(format_args!(
                "team key {} from {}: network wake on UDP {}",
                k.id(),
                settings.key_path.display(),
                settings.wake_port
            ));
            Some(k)
        }
        Err(e) => {
            log(format_args!("{e}: network wake is off until it is fixed"));
            None
        }
    };
    // With a key every beacon is sealed (docs/app.md "The beacon's seal").
    let seal = key
        .clone()
        .map(|k| start_nonce().map(|n| (k, n)))
        .transpose()?;
    if let Some((k, n)) = &seal {
        log(format_args!(
            "beacons sealed with team key {}, start nonce {n:016x}",
            k.id()
        ));
    }
    let net_wake = key.is_some() && settings.wake_port != 0;
    let mut wake_thread = None;
    if let (Some(key), true) = (key, net_wake) {
        let sock = UdpSocket::bind(("0.0.0.0", settings.wake_port)).map_err(|e| {
            format!(
                "cannot bind the network wake's UDP port {}: {e} (another nao-rs-beacon? \
                 set NAO_RS_WAKE_PORT, or 0 for no network wake)",
                settings.wake_port
            )
        })?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| format!("network wake socket: {e}"))?;
        let (body, page, ws, stop) = (
            settings.body_id.clone(),
            page.clone(),
            wake_socket.clone(),
            stop.clone(),
        );
        wake_thread = Some(
            std::thread::Builder::new()
                .name("beacon-wake".into())
                .spawn(move || wake_loop(sock, key, body, page, ws, stop))
                .map_err(|e| format!("cannot start the network wake's thread: {e}"))?,
        );
    }

    let out = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    if settings.mode == Mode::Broadcast {
        out.set_broadcast(true)
            .map_err(|e| format!("cannot enable broadcast: {e}"))?;
    }
    log(format_args!(
        "robot {} (body {}), page {}, beacons {:?} at {} Hz to port {}{}",
        settings.name,
        settings.body_id,
        page.display(),
        settings.mode,
        settings.hz,
        settings.beacon_port,
        if settings.targets.is_empty() {
            String::new()
        } else {
            format!(" and {:?}", settings.targets)
        }
    ));

    // The beat: the kit's absolute-deadline ticker on the beacon's clock
    // (the real one; the page's times are judged against it), so the rate
    // does not drift with the work; a late beat skips the beats it missed.
    let period_ns = Duration::from_secs_f64(1.0 / settings.hz).as_nanos() as u64;
    let mut ticker = Ticker::with_clock(MonotonicClock, period_ns);
    let mut broadcasts: Vec<Ipv4Addr> = Vec::new();
    let mut listed_at: Option<u64> = None;
    let mut failing = false;
    let mut seq = 0u64;
    // Acquire: pairs with the signal handler's store.
    while !stop.load(Ordering::Acquire) {
        // The first beat at once, then every period.
        let now = ticker.wait().start_ns;
        // Acquire: as above (a stop during the sleep sends no more).
        if stop.load(Ordering::Acquire) {
            break;
        }
        if settings.mode != Mode::Off {
            // The interfaces again every 5 s: wifi comes and goes.
            if settings.mode == Mode::Broadcast
                && listed_at.map_or(true, |t| now.saturating_sub(t) >= LIST_EVERY_NS)
            {
                broadcasts = nao_rs_beacon::broadcast_addresses().unwrap_or_default();
                listed_at = Some(now);
            }
            let view = read_page(&page);
            let st = read_status(&status);
            let b = service::compose(
                &settings,
                seq,
                &view,
                st.as_ref(),
                // Read after the page and the status file: a status is
                // never judged from the future.
                ticker.clock().now_ns(),
                net_wake,
            );
            let bytes = match &seal {
                Some((k, start)) => auth::seal_beacon(k, *start, &format::encode(&b)),
                None => format::encode(&b),
            };
            let mut sent = 0;
            let mut last_err = None;
            for t in targets(&settings, &broadcasts) {
                match out.send_to(&bytes, t) {
                    Ok(_) => sent += 1,
                    Err(e) => last_err = Some((t, e)),
                }
            }
            match (sent, last_err) {
                (0, Some((t, e))) if !failing => {
                    log(format_args!(
                        "no beacon went out (last: {t}: {e}); retrying every beat"
                    ));
                    failing = true;
                }
                (0, None) if !failing => {
                    log(format_args!(
                        "no target: no interface can broadcast and NAO_RS_BEACON_TARGETS is empty"
                    ));
                    failing = true;
                }
                (n, _) if n > 0 && failing => {
                    log(format_args!("beacons go out again"));
                    failing = false;
                }
                _ => {}
            }
            seq += 1;
        }
    }
    if let Some(t) = wake_thread {
        let _ = t.join();
    }
    log(format_args!("stopped"));
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(format_args!("{e}"));
            ExitCode::from(2)
        }
    }
}
