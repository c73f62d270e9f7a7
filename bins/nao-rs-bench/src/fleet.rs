//! The operator app's figures: STOP ALL over five virtual robots on
//! loopback, clicked through the app's HTTP API, and the CPU the robot's
//! beacon service takes (`docs/performance.md`, "The app's figures").
//!
//! Each robot is a [`Rig`] without a guard: `nao-rs-sim` with its trace and
//! `nao-rs run --controller stand` reading its own UDP stop port. One
//! `nao-rs-app --loopback-only --no-broadcast` names the five ports with
//! `--target`, so every datagram goes to 127.0.0.1. The arithmetic and the
//! parsing are pure functions below; the rest moves data.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use deathswitch::{monotonic_ns, Reason};

use super::http;
use super::rig::{self, Proc, Programs, Rig};
use super::trials::make_stiff;

/// The robots of the STOP ALL figure.
pub const ROBOTS: usize = 5;

/// The virtual robots and the app.
pub struct SimFleet {
    /// The robots, each with its runtime running.
    pub robots: Vec<Rig>,
    app: Option<Proc>,
    page: Option<SocketAddr>,
    programs: Programs,
    // Dropped last: the app's log.
    dir: tempfile::TempDir,
}

impl SimFleet {
    /// Starts `n` robots (sim + runtime each, no guard, each its own free
    /// UDP stop port); the runtimes start limp.
    pub fn start(programs: &Programs, n: usize) -> Result<SimFleet, String> {
        let mut robots = Vec::with_capacity(n);
        for i in 0..n {
            let mut r = Rig::start_with(programs.clone(), false)
                .map_err(|e| format!("robot {}: {e}", i + 1))?;
            r.start_runtime()
                .map_err(|e| format!("robot {}: {e}", i + 1))?;
            robots.push(r);
        }
        Ok(SimFleet {
            robots,
            app: None,
            page: None,
            programs: programs.clone(),
            dir: tempfile::Builder::new()
                .prefix("nao-rs-bench-")
                .tempdir()
                .map_err(|e| {
                    format!("cannot create a private folder: {e}; set TMPDIR to a writable folder")
                })?,
        })
    }

    /// Starts `nao-rs-app --loopback-only --no-broadcast --target
    /// 127.0.0.1:P ...` (one target a robot) on a free loopback port and
    /// waits (10 s at most) for the page's address on its first stdout line.
    pub fn start_app(&mut self) -> Result<SocketAddr, String> {
        let mut cmd = Command::new(rig::program(&self.programs, "nao-rs-app")?);
        cmd.args(["--loopback-only", "--no-broadcast"]);
        for r in &self.robots {
            cmd.arg("--target").arg(format!("127.0.0.1:{}", r.udp_port));
        }
        cmd.args(["--listen", "127.0.0.1:0", "--beacon-port", "0"])
            .args(["--beacon-bind", "127.0.0.1"]);
        let log = self.dir.path().join("app.log");
        let mut app = Proc::try_spawn("nao-rs-app", &mut cmd, Some(&log))?;
        let end = Instant::now() + Duration::from_secs(10);
        let page = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(a) = page_address(&text) {
                break a;
            }
            if !app.running() || Instant::now() > end {
                return Err(format!(
                    "nao-rs-app named no page address within 10 s:\n{}",
                    app.log_tail(8)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.app = Some(app);
        self.page = Some(page);
        Ok(page)
    }
}

/// The page's address from the app's stdout
/// (`nao-rs-app: page http://127.0.0.1:PORT/ beacons udp ...`).
pub fn page_address(log: &str) -> Option<SocketAddr> {
    log.lines().find_map(|l| {
        let rest = &l[l.find("page http://")? + "page http://".len()..];
        rest.split('/').next()?.parse().ok()
    })
}

/// What the app answered to `POST /api/stop-all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopAllAnswer {
    /// Datagrams that left.
    pub sent: u64,
    /// Datagrams the kernel refused.
    pub failed: u64,
    /// Targets of each round.
    pub targets: usize,
    /// The request reaching the app -> every target sent to once, µs.
    pub click_to_first_round_us: u64,
    /// The request -> the last datagram, µs.
    pub click_to_done_us: u64,
}

/// Parses the app's JSON answer to `POST /api/stop-all`.
pub fn parse_answer(body: &[u8]) -> Result<StopAllAnswer, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the answer is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    })?;
    let num = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("the answer has no number {k:?}: {v}"))
    };
    Ok(StopAllAnswer {
        sent: num("sent")?,
        failed: num("failed")?,
        targets: v
            .get("targets")
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len),
        click_to_first_round_us: num("click_to_first_round_us")?,
        click_to_done_us: num("click_to_done_us")?,
    })
}

/// One STOP ALL trial.
#[derive(Debug, Clone, Copy)]
pub struct StopAllSample {
    /// Just before the request was written, ns.
    pub t0_ns: u64,
    /// The first robot's first all-off frame, ns.
    pub first_all_off_ns: u64,
    /// The last robot's first all-off frame, ns.
    pub last_all_off_ns: u64,
    /// The app's answer.
    pub answer: StopAllAnswer,
}

/// One STOP ALL: every robot re-armed and woken until stiff, then the
/// click (`POST /api/stop-all`), then each robot's first all-off frame at
/// or after the click, each robot's trip reason checked (`udp`).
pub fn stop_all_trial(f: &mut SimFleet) -> Result<StopAllSample, String> {
    let page = f.page.ok_or("the app is not running")?;
    for (i, r) in f.robots.iter_mut().enumerate() {
        make_stiff(r, false).map_err(|e| format!("robot {}: {e}", i + 1))?;
    }
    let mut from = Vec::with_capacity(f.robots.len());
    for r in &mut f.robots {
        r.poll()?;
        from.push(r.frames.len());
    }
    let mut t0 = 0;
    let resp = http::post(page, "/api/stop-all", Duration::from_secs(5), || {
        t0 = monotonic_ns();
    })?;
    if resp.status != 200 {
        return Err(format!(
            "POST /api/stop-all answered {}: {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        ));
    }
    let answer = parse_answer(&resp.body)?;
    if answer.targets < f.robots.len() || answer.sent == 0 || answer.failed > 0 {
        return Err(format!(
            "STOP ALL went to {} targets, {} datagrams sent, {} refused; expected {} robots",
            answer.targets,
            answer.sent,
            answer.failed,
            f.robots.len()
        ));
    }
    let (mut first, mut last) = (u64::MAX, 0);
    for (i, r) in f.robots.iter_mut().enumerate() {
        let pid = r.runtime_pid();
        let fr = r
            .wait_frame(from[i], Duration::from_secs(1), |l| {
                l.peer_pid == pid && l.is_cycle_frame() && l.all_off && l.t_ns >= t0
            })?
            .ok_or_else(|| {
                format!(
                    "robot {} (udp {}): no all-off frame within 1 s of STOP ALL",
                    i + 1,
                    r.udp_port
                )
            })?;
        let reason = r.page.snapshot().reason;
        if reason != Some(Reason::Udp) {
            return Err(format!(
                "robot {}: tripped with {:?}, expected udp",
                i + 1,
                reason.map(Reason::name)
            ));
        }
        first = first.min(fr.t_ns);
        last = last.max(fr.t_ns);
    }
    Ok(StopAllSample {
        t0_ns: t0,
        first_all_off_ns: first,
        last_all_off_ns: last,
        answer,
    })
}

/// `utime + stime` (fields 14 and 15, clock ticks) of a `/proc/PID/stat`
/// text: the process's CPU time, every thread, alive or ended.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let f = rig::stat_fields(stat);
    // Field 3 (the state) is index 0: field 14 is index 11.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    utime.checked_add(stime)
}

/// CPU time over wall time as thousandths of a percent of one core
/// (1,000 = 1 %), rounded to the nearest: `cpu_ticks` at `clk_tck` ticks a
/// second over `elapsed_ns`. `None` for no time or no tick rate.
pub fn percent_milli(cpu_ticks: u64, clk_tck: u64, elapsed_ns: u64) -> Option<u64> {
    if clk_tck == 0 || elapsed_ns == 0 {
        return None;
    }
    // ticks / tck s of CPU per elapsed_ns / 1e9 s, times 100 % times 1,000.
    let num = u128::from(cpu_ticks) * 1_000_000_000 * 100_000;
    let den = u128::from(clk_tck) * u128::from(elapsed_ns);
    u64::try_from((num + den / 2) / den).ok()
}

/// CPU nanoseconds over wall nanoseconds, thousandths of a percent.
pub fn percent_milli_ns(cpu_ns: u64, elapsed_ns: u64) -> Option<u64> {
    if elapsed_ns == 0 {
        return None;
    }
    let num = u128::from(cpu_ns) * 100_000;
    let den = u128::from(elapsed_ns);
    u64::try_from((num + den / 2) / den).ok()
}

/// The kernel's clock ticks a second (`sysconf(_SC_CLK_TCK)`).
pub fn clk_tck() -> Option<u64> {
    // SAFETY: sysconf only reads a constant of the C library; no memory of
    // ours is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0)
}

fn cpu_ticks(pid: i32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    stat_cpu_ticks(&text).ok_or_else(|| format!("{path} has no utime and stime: {text:?}"))
}

/// The beacon's CPU over the windows.
#[derive(Debug, Clone, Default)]
pub struct BeaconCpu {
    /// Each window from `/proc/PID/stat` utime + stime, 1/1000 %.
    pub percent_milli: Vec<u64>,
    /// Each window from the threads' `schedstat` (ns resolution), 1/1000 %.
    pub precise_milli: Vec<u64>,
    /// Beacons received in each window.
    pub beacons: Vec<u64>,
    /// The window length, s.
    pub seconds: f64,
    /// The tick rate.
    pub clk_tck: u64,
}

/// Runs `nao-rs-beacon` at its default rate against `robot` (unicast to a
/// loopback socket of the bench; with a team key, so the network wake
/// listens on a free port as on a robot with a key) and measures its CPU
/// over `windows` windows of `seconds` each, after its first beacon.
pub fn beacon_cpu(robot: &mut Rig, seconds: u64, windows: u32) -> Result<BeaconCpu, String> {
    let bin = rig::program(robot.programs(), "nao-rs-beacon")?;
    let tck = clk_tck().ok_or("sysconf(_SC_CLK_TCK) gave no tick rate")?;
    // The robot runs: armed and stiff, its runtime writing the status file.
    make_stiff(robot, false)?;
    let sink = UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot bind a UDP socket on 127.0.0.1: {e}"))?;
    let sink_addr = sink.local_addr().map_err(|e| e.to_string())?;
    sink.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| format!("cannot set the beacon socket's timeout: {e}"))?;
    let key = robot.dir().join("team.key");
    {
        use std::io::Write;
        let mut k = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&key)
            .map_err(|e| format!("cannot write the team key {}: {e}", key.display()))?;
        let bytes: Vec<u8> = (0..32u64)
            .map(|i| (monotonic_ns().wrapping_mul(i + 7) >> 13) as u8)
            .collect();
        k.write_all(&bytes)
            .map_err(|e| format!("cannot write the team key {}: {e}", key.display()))?;
    }
    let wake_port = rig::free_udp_port();
    let mut cmd = Command::new(&bin);
    cmd.arg("--page")
        .arg(robot.page_path())
        .arg("--status")
        .arg(robot.status_path())
        .arg("--wake-socket")
        .arg(robot.wake_path())
        .env("NAO_RS_BEACON", "unicast")
        .env("NAO_RS_BEACON_TARGETS", sink_addr.to_string())
        .env_remove("NAO_RS_BEACON_HZ")
        .env("NAO_RS_TEAM_KEY", &key)
        .env("NAO_RS_WAKE_PORT", wake_port.to_string())
        .env("NAO_RS_ROBOT_NAME", "bench-robot")
        .env("NAO_RS_BODY_ID", "bench-robot-1");
    let mut beacon = Proc::try_spawn(
        "nao-rs-beacon",
        &mut cmd,
        Some(&robot.dir().join("beacon.log")),
    )?;
    let mut buf = [0u8; 2048];
    let end = Instant::now() + Duration::from_secs(5);
    while sink.recv_from(&mut buf).is_err() {
        if !beacon.running() || Instant::now() > end {
            return Err(format!(
                "nao-rs-beacon sent no beacon to {sink_addr} within 5 s:\n{}",
                beacon.log_tail(8)
            ));
        }
    }
    let pid = beacon.pid() as i32;
    let mut out = BeaconCpu {
        seconds: seconds as f64,
        clk_tck: tck,
        ..BeaconCpu::default()
    };
    for _ in 0..windows {
        let (c0, p0, t0) = (
            cpu_ticks(pid)?,
            rig::process_cpu_ns(pid).unwrap_or(0),
            monotonic_ns(),
        );
        let stop = Instant::now() + Duration::from_secs(seconds);
        let mut n = 0;
        while Instant::now() < stop {
            if sink.recv_from(&mut buf).is_ok() {
                n += 1;
            }
        }
        let (c1, p1, t1) = (
            cpu_ticks(pid)?,
            rig::process_cpu_ns(pid).unwrap_or(0),
            monotonic_ns(),
        );
        if !beacon.running() {
            return Err(format!(
                "nao-rs-beacon ended during the measurement:\n{}",
                beacon.log_tail(8)
            ));
        }
        let el = t1.saturating_sub(t0);
        out.percent_milli
            .extend(percent_milli(c1.saturating_sub(c0), tck, el));
        out.precise_milli
            .extend(percent_milli_ns(p1.saturating_sub(p0), el));
        out.beacons.push(n);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_address_is_read_from_the_apps_first_line() {
        let log = "nao-rs-app: page http://127.0.0.1:41234/ beacons udp 127.0.0.1:5000\n\
                   nao-rs-app: no --key: network wake off\n";
        assert_eq!(page_address(log), Some("127.0.0.1:41234".parse().unwrap()));
        assert_eq!(page_address("nao-rs-app: starting\n"), None);
        assert_eq!(page_address("page http://nonsense/"), None);
    }

    #[test]
    fn the_apps_stop_all_answer_parses() {
        let a = parse_answer(
            br#"{"scope":"all","targets":["127.0.0.1:1","127.0.0.1:2"],"sent":20,"failed":0,
                 "click_to_first_round_us":57,"click_to_done_us":45210,"first_round_unix_ns":1}"#,
        )
        .unwrap();
        assert_eq!(
            a,
            StopAllAnswer {
                sent: 20,
                failed: 0,
                targets: 2,
                click_to_first_round_us: 57,
                click_to_done_us: 45210,
            }
        );
        assert!(parse_answer(b"{\"error\":\"no\"}").is_err());
        assert!(parse_answer(b"<html>").is_err());
    }

    #[test]
    fn stat_cpu_is_utime_plus_stime() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime ...
        let stat = "4242 (nao rs) beacon) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 2";
        assert_eq!(stat_cpu_ticks(stat), Some(12));
        assert_eq!(stat_cpu_ticks("4242 (x) S 1 2"), None);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(stat_cpu_ticks(&me).is_some());
    }

    #[test]
    fn cpu_percent_of_one_core_in_thousandths() {
        // 1 tick at 100 Hz over 10 s: 10 ms / 10 s = 0.1 %.
        assert_eq!(percent_milli(1, 100, 10_000_000_000), Some(100));
        // A whole core: 1,000 ticks over 10 s.
        assert_eq!(percent_milli(1000, 100, 10_000_000_000), Some(100_000));
        assert_eq!(percent_milli(0, 100, 10_000_000_000), Some(0));
        // Rounded to the nearest thousandth: 1 tick over 3 s = 0.3333 %.
        assert_eq!(percent_milli(1, 100, 3_000_000_000), Some(333));
        assert_eq!(percent_milli(2, 100, 3_000_000_000), Some(667));
        assert_eq!(percent_milli(1, 0, 1), None);
        assert_eq!(percent_milli(1, 100, 0), None);
        assert_eq!(percent_milli_ns(5_000_000, 10_000_000_000), Some(50));
        assert_eq!(percent_milli_ns(1, 0), None);
        assert!(clk_tck().is_some_and(|t| t > 0));
    }
}
