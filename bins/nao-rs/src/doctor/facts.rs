//! What `nao-rs doctor` reads from the robot: plain data, gathered at the
//! edge by [`gather`] (every path under a root prefix, so a test points it
//! at a fake tree), judged by the pure [`super::judge::judge`].
//!
//! Read only: files are opened for reading, links read, directories
//! listed, `systemctl show` asked; nothing is written, created, loaded or
//! started.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nao_kit::facts::{Pidfd, StartupFacts};

/// Our units, in the order they start.
pub const OUR_UNITS: [&str; 3] = [
    "nao-rs-stop.socket",
    "nao-rs-guard.service",
    "nao-rs.service",
];
/// Aldebaran's units that hold or want the chest board, as system units
/// (team images) or as `nao`'s user units (NAO OS).
pub const HAL_UNITS: [&str; 3] = ["hal.service", "lola.service", "naoqi.service"];
/// The process names (`/proc/PID/comm`) of HAL, LoLA and NAOqi.
pub const HAL_PROCESSES: [&str; 3] = ["hal", "lola", "naoqi-bin"];
/// Where `nao`'s user units live on NAO OS 2.8.
pub const NAO_USER_UNITS: &str = "/nao/etc/systemd/user";
/// The programs the robot runs, installed by deploy.
pub const BINARIES: [&str; 4] = ["nao-rs", "nao-rs-guard", "naoctl", "nao-rs-beacon"];
/// Where deploy installs them.
pub const BIN_DIR: &str = "/usr/local/bin";
/// The settings both units read.
pub const CONF: &str = "/etc/nao-rs/nao-rs.conf";
/// The udev rule that gives the board to group `hal`.
pub const UDEV_RULE: &str = "/etc/udev/rules.d/99-nao-rs.rules";
/// The page's directory, made by tmpfiles at every boot.
pub const RUN_DIR: &str = "/run/nao-rs";
/// The tmpfiles file that makes it.
pub const TMPFILES: &str = "/etc/tmpfiles.d/nao-rs.conf";
/// Where limits files live.
pub const LIMITS_DIR: &str = "/etc/security/limits.d";
/// The stop port when nothing says otherwise (config/systemd units).
pub const DEFAULT_UDP_PORT: u16 = 7701;
/// How long `systemctl` may take to answer one question.
const SYSTEMCTL_DEADLINE: Duration = Duration::from_secs(5);
/// How far apart the page is read twice to see the heartbeat advance
/// (the runtime beats every 12 ms cycle).
pub const HEARTBEAT_GAP: Duration = Duration::from_millis(100);

/// Everything the doctor judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The chest boards enumerated in sysfs (`Err`: sysfs unreadable).
    pub boards: Result<Vec<UsbDevice>, String>,
    /// The processes holding the first board's device node open.
    pub holders: Holders,
    /// The first board's device node (`/dev/bus/usb/BBB/DDD`).
    pub board_node: Option<Result<Node, String>>,
    /// `systemctl show` of [`OUR_UNITS`] then [`HAL_UNITS`] (`Err`: why
    /// systemctl could not answer).
    pub units: Result<Vec<Unit>, String>,
    /// Links in `nao`'s user units' `*.target.wants/` that start HAL,
    /// LoLA or NAOqi (NAO OS), with their paths.
    pub user_wants: Vec<String>,
    /// Running processes named as HAL, LoLA or NAOqi.
    pub hal_processes: Vec<Proc>,
    /// `NAO_RS_UDP_PORT` of the settings file (`None`: not set there).
    pub conf_port: Option<String>,
    /// The local UDP ports bound (/proc/net/udp and udp6); `Err`: unreadable.
    pub udp_ports: Result<Vec<u16>, String>,
    /// Group `hal` and user `nao`.
    pub groups: Groups,
    /// The udev rule's text (`Err`: why it could not be read).
    pub udev_rule: Result<String, String>,
    /// `/run/nao-rs`.
    pub run_dir: Result<Node, String>,
    /// Whether the tmpfiles file is installed.
    pub tmpfiles_installed: bool,
    /// The limits.d files and their text.
    pub limits_files: Vec<(String, String)>,
    /// Each installed program: its path and how it is linked (`Err`: why
    /// it could not be read; `None`: not there).
    pub binaries: Vec<Binary>,
    /// The running kernel's release.
    pub kernel: String,
    /// What `pidfd_open` answered.
    pub pidfd: Pidfd,
    /// The page, read twice.
    pub page: PageFacts,
    /// The verification mark's text (`Ok(None)`: no file).
    pub mark: Result<Option<String>, String>,
}

pub use crate::chest_usb::UsbDevice;

/// A process, by pid and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// Its `comm`.
    pub name: String,
}

/// Who holds the board's node open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    /// The processes with an fd on it.
    pub by: Vec<Proc>,
    /// Processes whose fds could not be read (another user's, as non-root).
    pub unreadable: usize,
    /// `/proc` could not be listed.
    pub no_proc: bool,
}

/// A file's owner and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

impl Node {
    /// The permission bits with setuid, setgid and sticky.
    pub fn perm(&self) -> u32 {
        self.mode & 0o7777
    }
    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.mode & nix::libc::S_IFMT == nix::libc::S_IFDIR
    }
}

/// What `systemctl show` says of one unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unit {
    /// The unit's name.
    pub name: String,
    /// `LoadState` (`loaded`, `not-found`, `masked`).
    pub load: String,
    /// `ActiveState` (`active`, `inactive`, `failed`, `activating`).
    pub active: String,
    /// `SubState` (`running`, `listening`, `dead`).
    pub sub: String,
    /// `UnitFileState` (`enabled`, `disabled`, `static`, `masked`).
    pub file_state: String,
    /// `LimitRTPRIO`.
    pub limit_rtprio: String,
    /// `LimitMEMLOCK`.
    pub limit_memlock: String,
    /// `CPUSchedulingPriority`.
    pub cpu_priority: String,
    /// `Listen` (socket units: `[::]:7701 (Datagram)`).
    pub listen: String,
    /// `Id`: the unit's own name; another name when the name asked is an
    /// alias (deploy may make `lola.service` an alias of nao-rs's unit).
    pub id: String,
}

impl Unit {
    /// The fields of `systemctl show` output (`KEY=value` lines).
    pub fn parse(name: &str, text: &str) -> Unit {
        let mut u = Unit {
            name: name.to_string(),
            ..Unit::default()
        };
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let slot = match k {
                "LoadState" => &mut u.load,
                "ActiveState" => &mut u.active,
                "SubState" => &mut u.sub,
                "UnitFileState" => &mut u.file_state,
                "LimitRTPRIO" => &mut u.limit_rtprio,
                "LimitMEMLOCK" => &mut u.limit_memlock,
                "CPUSchedulingPriority" => &mut u.cpu_priority,
                "Listen" => &mut u.listen,
                "Id" => &mut u.id,
                _ => continue,
            };
            *slot = v.trim().to_string();
        }
        u
    }
}

/// Group `hal` and user `nao` as /etc/group and /etc/passwd say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Groups {
    /// `hal`'s gid, if the group exists.
    pub hal_gid: Option<u32>,
    /// `hal`'s listed members.
    pub hal_members: Vec<String>,
    /// `nao`'s primary gid, if the user exists.
    pub nao_gid: Option<u32>,
}

/// One installed program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// Its name ([`BINARIES`]).
    pub name: String,
    /// Its path.
    pub path: String,
    /// `None`: no such file; `Err`: unreadable or not ELF.
    pub linking: Option<Result<nao_kit::elf::Linking, String>>,
}

/// The death switch page, read twice [`HEARTBEAT_GAP`] apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageFacts {
    /// It could not be read (the error names the path).
    Unreadable(String),
    /// It was read.
    Read(PageRead),
}

/// The fields of two reads of the page the doctor judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRead {
    /// Its path.
    pub path: String,
    /// Armed (and not damaged), at the second read.
    pub armed: bool,
    /// The trip's reason (`page-lost` for a damaged page).
    pub reason: Option<String>,
    /// What is wrong with it.
    pub damage: Option<String>,
    /// The heartbeat's cycle at the first and second read.
    pub cycles: (Option<u64>, Option<u64>),
    /// The runtime the page names, and whether it lives.
    pub driver: Option<(u32, bool)>,
    /// The guard the page names, whether it lives, and whether it holds the board.
    pub guard: Option<(u32, bool, bool)>,
}

/// The root prefix every path is read under.
#[derive(Debug, Clone)]
pub struct Root(pub PathBuf);

impl Root {
    /// `path` (absolute on the robot) under the root.
    pub fn at(&self, path: impl AsRef<Path>) -> PathBuf {
        let p = path.as_ref();
        self.0.join(p.strip_prefix("/").unwrap_or(p))
    }
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn node(path: &Path) -> Result<Node, String> {
    let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Node {
        uid: m.uid(),
        gid: m.gid(),
        mode: m.mode(),
    })
}

/// Reads every fact under `root`; `page` is the page's path on the robot.
pub fn gather(root: &Root, page: Option<&Path>) -> Facts {
    let boards = crate::chest_usb::chest_boards(&root.at(crate::chest_usb::SYSFS_DEVICES));
    let first = boards.as_ref().ok().and_then(|b| b.first().cloned());
    let (holders, hal_processes) = scan_proc(root, first.as_ref().map(UsbDevice::node));
    let board_node = first.as_ref().map(|b| node(&root.at(b.node())));
    let conf = read_text(&root.at(CONF)).unwrap_or_default();
    let conf_value = |key: &str| {
        conf.lines().rev().find_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let page_path = page
        .map(Path::to_path_buf)
        .or_else(|| conf_value("NAO_RS_PAGE").map(PathBuf::from))
        .unwrap_or_else(deathswitch::default_path);
    let startup = StartupFacts::probe();
    Facts {
        boards,
        holders,
        board_node,
        units: systemctl_units(root),
        user_wants: user_wants(root),
        hal_processes,
        conf_port: conf_value("NAO_RS_UDP_PORT"),
        udp_ports: udp_ports(root),
        groups: groups(root),
        udev_rule: read_text(&root.at(UDEV_RULE)),
        run_dir: node(&root.at(RUN_DIR)),
        tmpfiles_installed: root.at(TMPFILES).is_file(),
        limits_files: limits_files(root),
        binaries: BINARIES.iter().map(|n| binary(root, n)).collect(),
        kernel: startup.kernel,
        pidfd: startup.pidfd,
        page: read_page(&root.at(&page_path), &page_path),
        mark: match std::fs::read_to_string(root.at(nao_kit::verify_mark::PATH)) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", nao_kit::verify_mark::PATH)),
        },
    }
}

/// One pass over `/proc`: who holds `node` open, and which processes are
/// HAL, LoLA or NAOqi.
fn scan_proc(root: &Root, node: Option<String>) -> (Holders, Vec<Proc>) {
    let mut holders = Holders::default();
    let mut hal = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.at("/proc")) else {
        holders.no_proc = true;
        return (holders, hal);
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = e.path();
        let name = std::fs::read_to_string(dir.join("comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if HAL_PROCESSES.contains(&name.as_str()) {
            hal.push(Proc {
                pid,
                name: name.clone(),
            });
        }
        let Some(node) = &node else { continue };
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            holders.unreadable += 1;
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == node.as_str()));
        if holds {
            holders.by.push(Proc { pid, name });
        }
    }
    holders.by.sort_by_key(|p| p.pid);
    hal.sort_by_key(|p| p.pid);
    (holders, hal)
}

/// `systemctl` under the root, the first that exists.
fn systemctl_path(root: &Root) -> Option<PathBuf> {
    ["/usr/bin/systemctl", "/bin/systemctl"]
        .iter()
        .map(|p| root.at(p))
        .find(|p| p.is_file())
}

/// `systemctl show` of our units and Aldebaran's, one call each.
fn systemctl_units(root: &Root) -> Result<Vec<Unit>, String> {
    let sc = systemctl_path(root).ok_or_else(|| {
        format!(
            "no systemctl at {} or {}: nao-rs is started by systemd",
            root.at("/usr/bin/systemctl").display(),
            root.at("/bin/systemctl").display()
        )
    })?;
    OUR_UNITS
        .iter()
        .chain(HAL_UNITS.iter())
        .map(|u| {
            let out = run_deadline(
                Command::new(&sc).args([
                    "show",
                    "--no-pager",
                    "--property=LoadState,ActiveState,SubState,UnitFileState,LimitRTPRIO,\
                     LimitMEMLOCK,CPUSchedulingPriority,Listen,Id",
                    u,
                ]),
                SYSTEMCTL_DEADLINE,
            )
            .map_err(|e| format!("{} show {u}: {e}", sc.display()))?;
            Ok(Unit::parse(u, &out))
        })
        .collect()
}

/// Runs `cmd` and returns its stdout, or why not (its stderr, its exit
/// status, or the deadline passed: then it is killed).
fn run_deadline(cmd: &mut Command, deadline: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", deadline.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    // The answers are a few hundred bytes: the pipes never fill.
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        // One line: a report line holds it.
        let why = err.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(if why.is_empty() {
            format!("exited with {status}")
        } else {
            why
        });
    }
    Ok(out)
}

/// The links in `nao`'s `*.target.wants/` that start HAL, LoLA or NAOqi.
fn user_wants(root: &Root) -> Vec<String> {
    let base = root.at(NAO_USER_UNITS);
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(&base) else {
        return found;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".wants") {
            continue;
        }
        for u in HAL_UNITS {
            let link = e.path().join(u);
            // symlink_metadata: a link to a missing file counts too.
            if std::fs::symlink_metadata(&link).is_err() {
                continue;
            }
            // A unit of that name that starts nao-rs's side (deploy's
            // stand-in for lola.service) is not LoLA.
            let text = std::fs::read_to_string(&link).unwrap_or_default();
            if !text.contains("nao-rs") {
                found.push(format!("{NAO_USER_UNITS}/{name}/{u}"));
            }
        }
    }
    found.sort();
    found
}

/// The local ports of /proc/net/udp and /proc/net/udp6.
fn udp_ports(root: &Root) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    let mut read_any = false;
    let mut errors = Vec::new();
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        match read_text(&root.at(f)) {
            Ok(t) => {
                read_any = true;
                ports.extend(parse_udp_ports(&t));
            }
            Err(e) => errors.push(e),
        }
    }
    if !read_any {
        return Err(errors.join("; "));
    }
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// The local ports of a /proc/net/udp text (`local_address` is
/// `ADDR:PORT`, the port in hex). Lines that do not parse are skipped.
pub fn parse_udp_ports(text: &str) -> Vec<u16> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let local = l.split_ascii_whitespace().nth(1)?;
            let (_, port) = local.rsplit_once(':')?;
            u16::from_str_radix(port, 16).ok()
        })
        .collect()
}

fn groups(root: &Root) -> Groups {
    let group = read_text(&root.at("/etc/group")).unwrap_or_default();
    let passwd = read_text(&root.at("/etc/passwd")).unwrap_or_default();
    let mut g = Groups::default();
    for l in group.lines() {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() >= 4 && f[0] == "hal" {
            g.hal_gid = f[2].parse().ok();
            g.hal_members = f[3]
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(String::from)
                .collect();
        }
    }
    for l in passwd.lines() {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() >= 4 && f[0] == "nao" {
            g.nao_gid = f[3].parse().ok();
        }
    }
    g
}

fn limits_files(root: &Root) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(root.at(LIMITS_DIR)) else {
        return Vec::new();
    };
    let mut files: Vec<(String, String)> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".conf"))
        .filter_map(|e| {
            let name = format!("{LIMITS_DIR}/{}", e.file_name().to_string_lossy());
            Some((name, std::fs::read_to_string(e.path()).ok()?))
        })
        .collect();
    files.sort();
    files
}

/// The largest program read whole (a robot binary is 2-4 MB).
const MAX_BINARY: u64 = 256 << 20;

fn binary(root: &Root, name: &str) -> Binary {
    let path = format!("{BIN_DIR}/{name}");
    let p = root.at(&path);
    let linking = match std::fs::File::open(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("{path}: {e}"))),
        Ok(f) => {
            let mut bytes = Vec::new();
            Some(
                f.take(MAX_BINARY)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("{path}: {e}"))
                    .and_then(|_| nao_kit::elf::read(&bytes).map_err(|e| format!("{path} {e}"))),
            )
        }
    };
    Binary {
        name: name.to_string(),
        path,
        linking,
    }
}

/// Reads the page at `at` (its robot path `shown`) twice, [`HEARTBEAT_GAP`]
/// apart, read only (`deathswitch::inspect`, as `naoctl status`); the
/// processes it names are looked up as the page's rules do
/// (`ProcessIdentity::is_alive`: pid and start time).
fn read_page(at: &Path, shown: &Path) -> PageFacts {
    let first = match deathswitch::inspect(at) {
        Ok(i) => i,
        Err(e) => return PageFacts::Unreadable(e.to_string()),
    };
    std::thread::sleep(HEARTBEAT_GAP);
    let second = match deathswitch::inspect(at) {
        Ok(i) => i,
        Err(e) => return PageFacts::Unreadable(e.to_string()),
    };
    let s = &second.snapshot;
    let alive = |pid: u32, start| deathswitch::process::ProcessIdentity { pid, start }.is_alive();
    PageFacts::Read(PageRead {
        path: shown.display().to_string(),
        armed: s.armed && second.damage.is_none(),
        reason: if second.damage.is_some() {
            Some(deathswitch::Reason::PageLost.name().to_string())
        } else {
            s.reason.map(|r| r.name().to_string())
        },
        damage: second.damage.map(|d| d.to_string()),
        cycles: (first.snapshot.last_cycle, s.last_cycle),
        driver: s.driver_pid.map(|p| (p, alive(p, s.driver_start))),
        guard: s
            .guard_pid
            .map(|p| (p, alive(p, s.guard_start), s.guard_holding)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_parses_proc_net_udp_and_systemctl_show() {
        let udp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                   1: 00000000:1E15 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000 0\n\
                   2: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000 0\n\
                   garbage\n";
        assert_eq!(parse_udp_ports(udp), vec![7701, 53]);
        let show = "LoadState=loaded\nActiveState=active\nSubState=listening\n\
                    UnitFileState=enabled\nListen=[::]:7701 (Datagram)\nLimitRTPRIO=40\nnoise\n";
        let u = Unit::parse("nao-rs-stop.socket", show);
        assert_eq!(
            (
                u.load.as_str(),
                u.active.as_str(),
                u.sub.as_str(),
                u.file_state.as_str()
            ),
            ("loaded", "active", "listening", "enabled")
        );
        assert_eq!(
            (u.listen.as_str(), u.limit_rtprio.as_str()),
            ("[::]:7701 (Datagram)", "40")
        );
    }
}
