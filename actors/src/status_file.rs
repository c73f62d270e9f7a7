//! The runtime's status file and its non-real-time side.
//!
//! [`StatusFile`]: what the page does not hold (battery, each joint's
//! stiffness and temperature, lateness, the motion state, ...), one JSON
//! line, for the beacon (`nao-rs-beacon`), `nao-rs demo` and
//! `nao-rs-bench`. Written by the runtime itself, however it is hosted
//! (`nao-rs run` or a program linking the library): `Monitor`, a
//! normal-priority thread, rewrites it every `STATUS_PERIOD_NS`
//! (10 Hz) atomically (a temp file renamed over it), mode 0640 whatever the
//! umask. Path: [`super::Config::status_file`] (`nao-rs run
//! --status-file`), else `$NAO_RS_STATUS`, else `status.json` next to the
//! page (`/run/nao-rs/status.json`).
//!
//! The same thread checks, once a second, whether the guard named in the
//! page (`guard_pid` with its start time `guard_start`) is alive; the cycle
//! raises the `guard-dead` safety flag while it is not.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nao_wire::protocol::chest_button::ChestButtonMode;
use nao_wire::protocol::tables::JOINT_NAMES;
use nao_wire::JOINTS;

use super::{Handle, Motion};

/// The environment variable naming the status file.
pub(crate) const ENV_STATUS: &str = "NAO_RS_STATUS";
/// The status file's mode: the owner writes, the group (`hal`: the beacon)
/// reads.
pub(crate) const MODE: u32 = 0o640;
/// The status file's format version (the `version` field).
pub(crate) const VERSION: u32 = 1;

/// The status file's path for a page at `page` (`None`: no page file):
/// `$NAO_RS_STATUS`, else `status.json` next to the page.
pub fn default_path(page: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_STATUS) {
        return Some(PathBuf::from(p));
    }
    let dir = page?.parent()?;
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Some(dir.join("status.json"))
}

/// The battery as the last answer gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct BatteryStatus {
    /// Charge, per mille.
    pub charge_per_mille: u16,
    /// Current, mA (positive: drawn).
    pub current_ma: i16,
    /// The battery board's status word.
    pub status: u16,
    /// Temperature, 0.1 degC.
    pub temperature_decideg: i16,
}

/// The hottest joint of the last answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HottestJoint {
    /// Its index (joint index order, `docs/protocol.md`).
    pub index: usize,
    /// Its name (`HeadYaw`, ...).
    pub name: String,
    /// Its temperature, degC.
    pub temperature_c: i8,
}

/// The runtime's status file: one JSON line. Each field is the runtime's
/// [`Handle::status`], [`Handle::switch`] or last frame
/// ([`Handle::latest_sensors`]) when written, in the unit its name ends
/// with; the fields are in alphabetical order. Fields added after the first
/// version read as their default when missing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatusFile {
    /// The battery.
    #[serde(default)]
    pub battery: BatteryStatus,
    /// The chest button mode the runtime runs
    /// (`nao_wire::protocol::chest_button::ChestButtonMode`, as
    /// `--chest-button` spells it): `trip` (every press stops the robot) or
    /// `hold:MS` (a press held MS ms stops it; a shorter one reaches the
    /// program only); empty in a file of a runtime from before the field.
    #[serde(default)]
    pub chest_button: String,
    /// Cycles run.
    pub cycle: u64,
    /// `None` where the counting allocator is not installed.
    pub cycle_allocations: Option<u64>,
    /// The safety flags raised, by name.
    pub flags: Vec<String>,
    /// The hottest joint (`None` before the first answer).
    #[serde(default)]
    pub hottest_joint: Option<HottestJoint>,
    /// The last cycle's lateness.
    pub lateness_us: u64,
    /// Limp: the wake latch held every stiffness at 0 in the last frame.
    pub limp: bool,
    /// The largest lateness so far.
    pub max_lateness_us: u64,
    /// The last frame's largest stiffness, per mille.
    pub max_stiffness: u32,
    /// When the file was written, ns of `CLOCK_MONOTONIC` (the clock of
    /// the page's heartbeat).
    #[serde(default)]
    pub monotonic_ns: u64,
    /// The motion state (`deathswitch::Motion::name`): `limp-tripped`,
    /// `limp-waiting-for-wake`, `awake`; `none` before the first frame.
    #[serde(default)]
    pub motion: String,
    /// Cycles that overran their period.
    pub overruns: u64,
    /// The runtime's process id.
    #[serde(default)]
    pub pid: u32,
    /// The trip reason, by name, while tripped.
    pub reason: Option<String>,
    /// Each joint's stiffness in the last frame sent, per mille (25,
    /// joint index order).
    #[serde(default)]
    pub stiffness: Vec<u16>,
    /// Each joint's temperature in the last answer, degC (25).
    #[serde(default)]
    pub temperature_c: Vec<i8>,
    /// When the file was written, ms since the Unix epoch (display only).
    #[serde(default)]
    pub time_unix_ms: u64,
    /// The switch as the last cycle read it.
    pub tripped: bool,
    /// The format's version (`VERSION`).
    #[serde(default)]
    pub version: u32,
}

/// The hottest of `temperature` (the first of equals), `None` for none.
pub(crate) fn hottest(temperature: &[i8; JOINTS]) -> Option<HottestJoint> {
    let (index, &t) = temperature
        .iter()
        .enumerate()
        .rev()
        .max_by_key(|(_, t)| **t)?;
    Some(HottestJoint {
        index,
        name: JOINT_NAMES[index].to_string(),
        temperature_c: t,
    })
}

impl StatusFile {
    /// The status of the runtime behind `h` now.
    pub(crate) fn of(h: &Handle, chest_button: ChestButtonMode) -> StatusFile {
        let s = h.status();
        let sw = h.switch();
        let f = h.latest_sensors();
        let cycle = s.cycles.load(Ordering::Relaxed);
        StatusFile {
            battery: BatteryStatus {
                charge_per_mille: f.battery.charge,
                current_ma: f.battery.current_ma,
                status: f.battery.status,
                temperature_decideg: f.battery.temperature_decideg,
            },
            chest_button: chest_button.to_string(),
            cycle,
            cycle_allocations: nao_kit::alloc::installed()
                .then(|| s.cycle_allocations.load(Ordering::Relaxed)),
            flags: deathswitch::flags::names(s.flags.load(Ordering::Relaxed))
                .map(|n| n.into_owned())
                .collect(),
            hottest_joint: (cycle > 0).then(|| hottest(&f.temperature)).flatten(),
            lateness_us: s.lateness_ns.load(Ordering::Relaxed) / 1000,
            limp: sw.limp,
            max_lateness_us: s.max_lateness_ns.load(Ordering::Relaxed) / 1000,
            max_stiffness: s.max_stiffness.load(Ordering::Relaxed),
            monotonic_ns: deathswitch::monotonic_ns(),
            motion: Motion::from_code(s.motion.load(Ordering::Relaxed))
                .unwrap_or(Motion::None)
                .name()
                .to_string(),
            overruns: s.overruns.load(Ordering::Relaxed),
            pid: std::process::id(),
            reason: sw.reason.map(|r| r.name().to_string()),
            stiffness: f.stiffness_sent.to_vec(),
            temperature_c: f.temperature.to_vec(),
            time_unix_ms: deathswitch::unix_ns() / 1_000_000,
            tripped: sw.tripped,
            version: VERSION,
        }
    }

    /// Reads the file at `path`; `None` while it is missing or not a status.
    pub fn read(path: &Path) -> Option<StatusFile> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(text.trim()).ok()
    }

    /// Writes the file at `path` whole: a temp file next to it (mode 0640
    /// whatever the umask), renamed over it.
    pub(crate) fn write(&self, path: &Path) -> std::io::Result<()> {
        let line = serde_json::to_string(self).map_err(std::io::Error::other)? + "\n";
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let r = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(MODE)
                .open(&tmp)?;
            f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
            f.write_all(line.as_bytes())?;
            std::fs::rename(&tmp, path)
        })();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }
}

/// The guard named in the page is dead (pure): a guard is named and the
/// process with its pid is gone or has another start time (`alive`:
/// [`deathswitch::process::ProcessIdentity::is_alive`] of it).
pub(crate) fn guard_dead(
    named: Option<deathswitch::process::ProcessIdentity>,
    alive: impl FnOnce() -> bool,
) -> bool {
    named.is_some() && !alive()
}

/// The runtime's non-real-time side: the status file and the guard's
/// liveness, on a normal-priority thread (`nao-rs-status`).
pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    /// Starts the thread: the status file at `path` (if any) every
    /// [`STATUS_PERIOD_NS`](crate::config::STATUS_PERIOD_NS), the guard's liveness into `guard_dead`
    /// every [`crate::config::GUARD_CHECK_PERIOD_NS`]. A failed write is logged
    /// once (and once more when writing works again).
    pub(crate) fn start(
        handle: Handle,
        chest_button: ChestButtonMode,
        path: Option<PathBuf>,
        guard_dead_flag: Arc<AtomicBool>,
        log: slog::Logger,
    ) -> std::io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = nao_kit::actor::thread("nao-rs-status").spawn(move || {
            let period = Duration::from_nanos(crate::config::STATUS_PERIOD_NS);
            let guard_every =
                (crate::config::GUARD_CHECK_PERIOD_NS / crate::config::STATUS_PERIOD_NS).max(1);
            let mut failing = false;
            // Writes until the next look at the guard (0: look now).
            let mut until_guard: u64 = 0;
            if let Some(p) = &path {
                slog::info!(log, "status file"; "path" => %p.display());
            }
            loop {
                // Acquire: pairs with the Release in `stop`.
                let last = s2.load(Ordering::Acquire);
                if until_guard == 0 {
                    until_guard = guard_every;
                    let s = handle.death_switch().peek();
                    let named = s
                        .guard_pid
                        .map(|pid| deathswitch::process::ProcessIdentity {
                            pid,
                            start: s.guard_start,
                        });
                    let dead = guard_dead(named, || named.is_some_and(|g| g.is_alive()));
                    // Relaxed: a status flag the cycle reads.
                    if guard_dead_flag.swap(dead, Ordering::Relaxed) != dead {
                        if dead {
                            slog::warn!(log, "the guard named in the page is not alive: \
                                    no take-over if this runtime hangs. Start it \
                                    (`systemctl start nao-rs-guard`)";
                                    "guard_pid" => named.map_or(0, |g| g.pid));
                        } else {
                            slog::info!(log, "the guard named in the page is alive");
                        }
                    }
                }
                if let Some(p) = &path {
                    match StatusFile::of(&handle, chest_button).write(p) {
                        Ok(()) if failing => {
                            failing = false;
                            slog::info!(log, "status file written again"; "path" => %p.display());
                        }
                        Ok(()) => {}
                        Err(e) if !failing => {
                            failing = true;
                            slog::warn!(
                                log,
                                "cannot write the status file {}: {} (the \
                                    beacon shows no battery, temperatures or stiffness). Fix: \
                                    make its directory writable, or set {} / --status-file",
                                p.display(),
                                e,
                                ENV_STATUS
                            );
                        }
                        Err(_) => {}
                    }
                }
                if last {
                    return;
                }
                until_guard -= 1;
                std::thread::park_timeout(period);
            }
        })?;
        Ok(Monitor {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread after one last write, and waits for it.
    pub(crate) fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        // Release: pairs with the Acquire in the thread.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_hottest_joint_is_the_first_of_the_hottest() {
        let mut t = [30i8; JOINTS];
        t[3] = 71;
        t[9] = 71;
        let h = hottest(&t).unwrap();
        assert_eq!((h.index, h.temperature_c), (3, 71));
        assert_eq!(h.name, JOINT_NAMES[3]);
    }

    #[test]
    fn a_guard_is_dead_only_when_one_is_named_and_it_is_not_alive() {
        let id = deathswitch::process::ProcessIdentity { pid: 7, start: 9 };
        assert!(
            !guard_dead(None, || false),
            "no guard named: nothing to flag"
        );
        assert!(!guard_dead(Some(id), || true));
        assert!(guard_dead(Some(id), || false));
    }

    #[test]
    fn the_status_file_is_written_whole_with_mode_0640_under_any_umask() {
        let dir = std::env::temp_dir().join(format!("nao-rs-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("status.json");
        let s = StatusFile {
            battery: BatteryStatus::default(),
            chest_button: "hold:1000".into(),
            cycle: 5,
            cycle_allocations: Some(0),
            flags: vec!["guard-dead".into()],
            hottest_joint: hottest(&[40; JOINTS]),
            lateness_us: 3,
            limp: true,
            max_lateness_us: 9,
            max_stiffness: 0,
            monotonic_ns: 1,
            motion: "limp-waiting-for-wake".into(),
            overruns: 0,
            pid: 1,
            reason: None,
            stiffness: vec![0; JOINTS],
            temperature_c: vec![40; JOINTS],
            time_unix_ms: 2,
            tripped: false,
            version: VERSION,
        };
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        s.write(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o640, "{mode:o}");
        assert_eq!(StatusFile::read(&path), Some(s));
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temp file left");
        // An old file without the new fields still reads.
        std::fs::write(
            &path,
            r#"{"cycle":1,"cycle_allocations":null,"flags":[],"lateness_us":0,"limp":false,"max_lateness_us":0,"max_stiffness":0,"overruns":0,"reason":null,"tripped":true}"#,
        )
        .unwrap();
        assert_eq!(StatusFile::read(&path).map(|s| s.cycle), Some(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_status_file_path_is_next_to_the_page() {
        if std::env::var_os(ENV_STATUS).is_some() {
            eprintln!("skipped: {ENV_STATUS} is set in this environment");
            return;
        }
        assert_eq!(
            default_path(Some(Path::new("/run/nao-rs/deathswitch"))),
            Some(PathBuf::from("/run/nao-rs/status.json"))
        );
        assert_eq!(default_path(None), None);
    }
}
