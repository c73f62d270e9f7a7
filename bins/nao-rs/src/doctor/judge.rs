//! The doctor's rules: [`judge`] turns [`Facts`] into one [`Check`] per
//! thing a working install needs, each `PASS`, `WARN` or `FAIL` with what
//! was found and, when not `PASS`, the fix (the exact command or file).
//! Pure: no I/O, table-tested.

use nao_kit::facts::Pidfd;
use nao_kit::verify_mark::{self, VerifyMark};

use super::facts::{
    Facts, PageFacts, PageRead, Unit, CONF, DEFAULT_UDP_PORT, HAL_UNITS, LIMITS_DIR,
    NAO_USER_UNITS, OUR_UNITS, RUN_DIR, TMPFILES, UDEV_RULE,
};

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// As it should be.
    Pass,
    /// Works, but not as deploy leaves it (or cannot be told).
    Warn,
    /// nao-rs does not work (or not safely) until it is fixed.
    Fail,
}

impl Status {
    /// `PASS`, `WARN`, `FAIL`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the doctor's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Its name (`chest-board`, `unit:nao-rs.service`).
    pub name: String,
    /// Its verdict.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// The fix (`None` for `PASS`).
    pub fix: Option<String>,
}

fn pass(name: &str, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status: Status::Pass,
        detail: detail.into(),
        fix: None,
    }
}

fn not(status: Status, name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    not(Status::Fail, name, detail, fix)
}

fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    not(Status::Warn, name, detail, fix)
}

/// The command that installs (or re-installs) everything, from the laptop.
pub const DEPLOY: &str = "cargo nao-rs deploy ROBOT";

/// The text of the check `verified` for a mark written with `--skip-verify`.
pub const SKIPPED: &str =
    "nao-rs was enabled without verifying its frames against this robot's HAL (deploy --skip-verify)";

/// Every check, in the order a person fixes them.
pub fn judge(f: &Facts) -> Vec<Check> {
    let mut out = vec![chest_board(f), board_holder(f), hal_lola_naoqi(f)];
    out.extend(units(f));
    out.push(stop_socket(f));
    out.push(group(f));
    out.push(udev(f));
    out.push(run_dir(f));
    out.push(limits(f));
    out.extend(binaries(f));
    out.push(kernel(f));
    out.extend(page(f));
    out.push(verified(f));
    out
}

fn chest_board(f: &Facts) -> Check {
    const N: &str = "chest-board";
    match &f.boards {
        Err(e) => fail(
            N,
            format!("the USB devices could not be listed: {e}"),
            "run on the robot (sysfs mounted at /sys)",
        ),
        Ok(b) if b.is_empty() => fail(
            N,
            format!(
                "no USB device {} in {}",
                crate::chest_usb::ids(),
                crate::chest_usb::SYSFS_DEVICES
            ),
            "the chest board is not enumerated: check the head's cable to the body and that the \
             body is powered (`lsusb -d ffff:0006`); a reboot re-enumerates it",
        ),
        Ok(b) => {
            let list: Vec<String> = b
                .iter()
                .map(|d| {
                    format!(
                        "{}:{} bus {:03} device {:03} ({}, {})",
                        d.vendor,
                        d.product,
                        d.bus,
                        d.dev,
                        d.node(),
                        d.sysfs
                    )
                })
                .collect();
            if b.len() > 1 {
                warn(
                    N,
                    format!("{} boards: {}", b.len(), list.join("; ")),
                    "one chest board is expected: the doctor judges the first; unplug the other",
                )
            } else {
                pass(N, list.join(""))
            }
        }
    }
}

/// The live runtime and guard the page names (a program that hosts the
/// runtime itself, docs/deploy.md, is ours by its registration).
fn page_pids(f: &Facts) -> Vec<u32> {
    match &f.page {
        PageFacts::Read(r) => r
            .driver
            .filter(|d| d.1)
            .map(|d| d.0)
            .into_iter()
            .chain(r.guard.filter(|g| g.1).map(|g| g.0))
            .collect(),
        PageFacts::Unreadable(_) => Vec::new(),
    }
}

/// A holder of the board that is nao-rs: by name, or registered in the page.
fn is_ours(p: &super::facts::Proc, page_pids: &[u32]) -> bool {
    p.name == "nao-rs" || p.name == "nao-rs-guard" || page_pids.contains(&p.pid)
}

/// The runtime the page names is alive and beating (whoever hosts it).
fn runtime_beats(f: &Facts) -> Option<u32> {
    match &f.page {
        PageFacts::Read(PageRead {
            driver: Some((pid, true)),
            cycles: (Some(a), Some(b)),
            ..
        }) if b > a => Some(*pid),
        _ => None,
    }
}

fn board_holder(f: &Facts) -> Check {
    const N: &str = "board-holder";
    let Some(node) = f
        .boards
        .as_ref()
        .ok()
        .and_then(|b| b.first())
        .map(|d| d.node())
    else {
        return fail(N, "no chest board to hold", "see chest-board");
    };
    let h = &f.holders;
    if h.no_proc {
        return fail(
            N,
            "/proc could not be listed",
            "run on the robot (/proc mounted)",
        );
    }
    let who: Vec<String> =
        h.by.iter()
            .map(|p| format!("{} (pid {})", p.name, p.pid))
            .collect();
    let ours = page_pids(f);
    let others: Vec<_> = h.by.iter().filter(|p| !is_ours(p, &ours)).collect();
    if let Some(o) = others.first() {
        let units = HAL_UNITS.join(", ");
        return fail(
            N,
            format!("{node} is held by {}", who.join(", ")),
            format!(
                "{} (pid {}) is not nao-rs: stop and disable the program that holds the board \
                 (HAL, LoLA: {units}; see hal-lola-naoqi), or `{DEPLOY}` disables them",
                o.name, o.pid
            ),
        );
    }
    if !h.by.is_empty() {
        return pass(N, format!("{node} is held by {}", who.join(", ")));
    }
    if h.unreadable > 0 {
        return warn(
            N,
            format!(
                "no process found holding {node}; the fds of {} processes could not be read",
                h.unreadable
            ),
            "run `nao-rs doctor` as root to see every holder",
        );
    }
    fail(
        N,
        format!("no process holds {node}: the runtime does not drive the board"),
        "`systemctl start nao-rs.service`; if it stops again, `journalctl -u nao-rs.service`",
    )
}

/// Whether a system unit would run: enabled (at boot) or active (now).
/// A name that is an alias of another unit (`Id` another name: deploy's
/// `lola.service` for nao-rs) is not HAL's.
fn runs(u: &Unit) -> bool {
    let alias = !u.id.is_empty() && u.id != u.name;
    u.load == "loaded"
        && !alias
        && (u.file_state.starts_with("enabled")
            || u.active == "active"
            || u.active == "activating"
            || u.active == "reloading")
}

fn hal_lola_naoqi(f: &Facts) -> Check {
    const N: &str = "hal-lola-naoqi";
    let mut found = Vec::new();
    let mut fixes = Vec::new();
    if let Ok(units) = &f.units {
        for u in units
            .iter()
            .filter(|u| HAL_UNITS.contains(&u.name.as_str()))
        {
            if runs(u) {
                found.push(format!(
                    "system unit {} is {} and {}",
                    u.name, u.file_state, u.active
                ));
                fixes.push(format!("systemctl disable --now {}", u.name));
            }
        }
    }
    for w in &f.user_wants {
        found.push(format!("nao's user unit link {w} starts it at boot"));
        fixes.push(format!("rm {w}"));
    }
    for p in &f.hal_processes {
        found.push(format!("{} runs (pid {})", p.name, p.pid));
    }
    if found.is_empty() {
        if let Err(e) = &f.units {
            return warn(
                N,
                format!(
                    "none in {NAO_USER_UNITS} and no process hal, lola or naoqi-bin; the system \
                     units could not be asked: {e}"
                ),
                "run on the robot, under systemd (`systemctl is-enabled hal lola naoqi`)",
            );
        }
        let scope = format!("system units and {NAO_USER_UNITS}");
        return pass(
            N,
            format!("none enabled or running ({scope}; processes hal, lola, naoqi-bin)"),
        );
    }
    let mut fix;
    if !fixes.is_empty() {
        let remount = f.user_wants.is_empty();
        if remount {
            fix = fixes.join("; ");
        } else {
            // NAO OS: the root file system is read-only.
            fix = format!(
                "mount -o remount,rw / && {} && mount -o remount,ro /",
                fixes.join(" && ")
            );
        }
        fix += "; then stop what still runs (`systemctl --user stop` as nao, or a reboot)";
    } else {
        fix = "stop them (they were started by hand or by another unit) or reboot".into();
    }
    fix += &format!("; `{DEPLOY}` does all of it");
    fail(N, found.join("; "), fix)
}

fn units(f: &Facts) -> Vec<Check> {
    OUR_UNITS
        .iter()
        .map(|name| {
            let n = format!("unit:{name}");
            let units = match &f.units {
                Ok(u) => u,
                Err(e) => {
                    return fail(
                        &n,
                        format!("systemctl could not answer: {e}"),
                        "run on the robot, under systemd (`systemctl is-system-running`)",
                    )
                }
            };
            let Some(u) = units.iter().find(|u| u.name == *name) else {
                return fail(&n, "not asked", format!("`systemctl status {name}`"));
            };
            if u.load != "loaded" {
                return fail(
                    &n,
                    format!("load state {}", show(&u.load)),
                    format!(
                        "install /etc/systemd/system/{name} (`{DEPLOY}`, or docs/deploy.md), then \
                         `systemctl daemon-reload`"
                    ),
                );
            }
            let enabled = u.file_state == "enabled";
            let active = u.active == "active";
            let state = format!(
                "{}, {} ({})",
                show(&u.file_state),
                show(&u.active),
                show(&u.sub)
            );
            match (enabled, active) {
                (true, true) => pass(&n, state),
                // A program that hosts the runtime itself takes the place
                // of nao-rs.service (docs/deploy.md): disabled and inactive.
                (false, false) if *name == "nao-rs.service" && runtime_beats(f).is_some() => warn(
                    &n,
                    format!(
                        "{state}; the runtime the page names (pid {}) beats: another program \
                         hosts the runtime in its place",
                        runtime_beats(f).unwrap_or(0)
                    ),
                    "nothing, if a team's program hosts the runtime (docs/deploy.md); otherwise \
                     `systemctl enable --now nao-rs.service`",
                ),
                (false, _) => fail(&n, state, format!("`systemctl enable --now {name}`")),
                (true, false) => fail(
                    &n,
                    state,
                    format!("`systemctl start {name}`; why it stopped: `journalctl -u {name}`"),
                ),
            }
        })
        .collect()
}

fn show(s: &str) -> &str {
    if s.is_empty() {
        "unknown"
    } else {
        s
    }
}

/// The port of a socket unit's `Listen` (`[::]:7701 (Datagram)`, `7701 (Datagram)`).
fn listen_port(listen: &str) -> Option<u16> {
    let addr = listen.split_ascii_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

fn stop_socket(f: &Facts) -> Check {
    const N: &str = "stop-socket";
    let conf = match &f.conf_port {
        None => Ok(DEFAULT_UDP_PORT),
        Some(p) => p.parse::<u16>().map_err(|_| p.clone()),
    };
    let conf = match conf {
        Ok(p) => p,
        Err(v) => {
            return fail(
                N,
                format!("NAO_RS_UDP_PORT={v} in {CONF} is not a port"),
                format!("set NAO_RS_UDP_PORT=7701 (or the socket's port) in {CONF}"),
            )
        }
    };
    let unit = f
        .units
        .as_ref()
        .ok()
        .and_then(|u| u.iter().find(|u| u.name == OUR_UNITS[0]));
    let Some(unit) = unit else {
        return fail(
            N,
            "systemctl could not say whether systemd holds the stop socket",
            "see unit:nao-rs-stop.socket",
        );
    };
    if unit.active != "active" {
        return fail(
            N,
            format!(
                "{} is {}: systemd does not hold the UDP stop port",
                unit.name,
                show(&unit.active)
            ),
            format!(
                "`systemctl start {0}`; if it fails (another program bound the port first), \
                 `systemctl status {0}` names it",
                unit.name
            ),
        );
    }
    let port = listen_port(&unit.listen);
    let Some(port) = port else {
        return fail(
            N,
            format!("{} listens on {:?}, no port", unit.name, unit.listen),
            "reinstall config/systemd/nao-rs-stop.socket (ListenDatagram=7701)",
        );
    };
    if port != conf {
        return fail(
            N,
            format!(
                "the socket listens on port {port} but the programs are told {conf} \
                 (NAO_RS_UDP_PORT): they refuse systemd's socket"
            ),
            format!(
                "change both to one port: NAO_RS_UDP_PORT in {CONF} and a drop-in \
                 /etc/systemd/system/nao-rs-stop.socket.d/port.conf (docs/deploy.md, \"Another \
                 UDP stop port\")"
            ),
        );
    }
    match &f.udp_ports {
        Err(e) => warn(
            N,
            format!(
                "{} active on port {port}; the bound ports could not be read: {e}",
                unit.name
            ),
            "run on the robot (/proc/net/udp)",
        ),
        Ok(p) if !p.contains(&port) => fail(
            N,
            format!(
                "{} says active but no UDP socket is bound on port {port}",
                unit.name
            ),
            format!("`systemctl restart {}`", unit.name),
        ),
        Ok(_) => pass(
            N,
            format!(
                "{} bound by systemd: UDP port {port} ({})",
                unit.name, unit.listen
            ),
        ),
    }
}

fn group(f: &Facts) -> Check {
    const N: &str = "group-hal";
    let g = &f.groups;
    let Some(gid) = g.hal_gid else {
        return fail(
            N,
            "no group hal in /etc/group",
            "`groupadd --system hal && usermod -aG hal nao`",
        );
    };
    let Some(nao_gid) = g.nao_gid else {
        return fail(
            N,
            "no user nao in /etc/passwd",
            "the units run as nao: create the user",
        );
    };
    if nao_gid == gid || g.hal_members.iter().any(|m| m == "nao") {
        pass(N, format!("group hal (gid {gid}) has nao"))
    } else {
        fail(
            N,
            format!("group hal (gid {gid}) exists but nao is not in it"),
            "`usermod -aG hal nao`",
        )
    }
}

fn udev(f: &Facts) -> Check {
    const N: &str = "udev-board";
    let reload = "`udevadm control --reload && udevadm trigger --attr-match=idVendor=ffff`";
    let rule = match &f.udev_rule {
        Err(e) => {
            return fail(
                N,
                format!("no udev rule: {e}"),
                format!(
                "install config/udev/99-nao-rs.rules as {UDEV_RULE} (`{DEPLOY}`), then {reload}"
            ),
            )
        }
        Ok(t) => t,
    };
    let whole = rule.lines().any(|l| {
        let l = l.trim();
        !l.starts_with('#')
            && l.contains("ATTR{idVendor}==\"ffff\"")
            && l.contains("ATTR{idProduct}==\"0006\"")
            && l.contains("GROUP=\"hal\"")
            && l.contains("MODE=\"0660\"")
    });
    if !whole {
        return fail(
            N,
            format!("{UDEV_RULE} has no line giving ffff:0006 to group hal, mode 0660"),
            format!("reinstall config/udev/99-nao-rs.rules as {UDEV_RULE}, then {reload}"),
        );
    }
    let (Some(node), Some(gid)) = (&f.board_node, f.groups.hal_gid) else {
        let why = if f.board_node.is_none() {
            "no chest board"
        } else {
            "no group hal"
        };
        return pass(
            N,
            format!("{UDEV_RULE} installed; the device not checked ({why})"),
        );
    };
    match node {
        Err(e) => fail(N, format!("the board's device node: {e}"), reload),
        Ok(n) if n.gid == gid && n.perm() & 0o777 == 0o660 => {
            pass(N, format!("{UDEV_RULE} installed; the board's node is group hal, mode 0660"))
        }
        Ok(n) => fail(
            N,
            format!(
                "the board's node is gid {} mode {:04o}, not group hal (gid {gid}) mode 0660",
                n.gid,
                n.perm()
            ),
            format!("{reload} (a rule after 99-nao-rs.rules may override it: `udevadm test` shows which)"),
        ),
    }
}

fn run_dir(f: &Facts) -> Check {
    const N: &str = "run-dir";
    let fix = if f.tmpfiles_installed {
        format!("`systemd-tmpfiles --create {TMPFILES}`")
    } else {
        format!("install config/tmpfiles.d/nao-rs.conf as {TMPFILES} (`{DEPLOY}`), then `systemd-tmpfiles --create {TMPFILES}`")
    };
    match (&f.run_dir, f.groups.hal_gid) {
        (Err(e), _) => fail(N, format!("{RUN_DIR} missing: {e}"), fix),
        (Ok(n), Some(gid)) if n.is_dir() && n.uid == 0 && n.gid == gid && n.perm() == 0o2770 => {
            pass(N, format!("{RUN_DIR} root:hal mode 2770"))
        }
        (Ok(n), _) => fail(
            N,
            format!(
                "{RUN_DIR} is {}uid {} gid {} mode {:04o}, not a directory root:hal mode 2770",
                if n.is_dir() { "" } else { "not a directory, " },
                n.uid,
                n.gid,
                n.perm()
            ),
            fix,
        ),
    }
}

/// The rtprio a limits.d text grants to `@hal` or `nao` (`- rtprio N`,
/// `hard rtprio N`); the largest.
fn limits_rtprio(text: &str) -> Option<u32> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('#').next()?.split_ascii_whitespace().collect();
            match f.as_slice() {
                [who, kind, "rtprio", n]
                    if (*who == "@hal" || *who == "nao") && (*kind == "-" || *kind == "hard") =>
                {
                    n.parse().ok()
                }
                _ => None,
            }
        })
        .max()
}

fn limits(f: &Facts) -> Check {
    const N: &str = "limits";
    let mut found = Vec::new();
    if let Ok(units) = &f.units {
        for u in units
            .iter()
            .filter(|u| u.name != OUR_UNITS[0] && OUR_UNITS.contains(&u.name.as_str()))
        {
            if u.load != "loaded" {
                continue;
            }
            let lim: Option<u64> = u.limit_rtprio.parse().ok();
            let prio: u64 = u.cpu_priority.parse().unwrap_or(0);
            let granted = matches!(lim, Some(l) if l >= prio.max(1));
            if !granted {
                return fail(
                    N,
                    format!(
                        "{}: LimitRTPRIO={} below its CPUSchedulingPriority={}: its threads cannot \
                         take their real-time priority",
                        u.name,
                        show(&u.limit_rtprio),
                        show(&u.cpu_priority)
                    ),
                    format!(
                        "reinstall config/systemd/{} (LimitRTPRIO, LimitMEMLOCK=infinity)",
                        u.name
                    ),
                );
            }
            if u.limit_memlock != "infinity" {
                return fail(
                    N,
                    format!(
                        "{}: LimitMEMLOCK={}, not infinity: it cannot lock its memory",
                        u.name,
                        show(&u.limit_memlock)
                    ),
                    format!(
                        "reinstall config/systemd/{} (LimitMEMLOCK=infinity)",
                        u.name
                    ),
                );
            }
            found.push(format!("{} LimitRTPRIO={}", u.name, u.limit_rtprio));
        }
    }
    let granted: Vec<String> = f
        .limits_files
        .iter()
        .filter_map(|(p, t)| limits_rtprio(t).map(|n| format!("{p} rtprio {n}")))
        .collect();
    if granted.is_empty() {
        let units = if found.is_empty() {
            "the units not read".into()
        } else {
            found.join(", ")
        };
        return warn(
            N,
            format!("{units}; no file in {LIMITS_DIR} grants rtprio to @hal or nao: a program outside the units (a team's program hosting the runtime) runs without real-time priority"),
            format!("a file in {LIMITS_DIR}/ with the line `@hal - rtprio 40` (`{DEPLOY}` installs one)"),
        );
    }
    found.extend(granted);
    pass(N, found.join(", "))
}

fn binaries(f: &Facts) -> Vec<Check> {
    f.binaries
        .iter()
        .filter_map(|b| {
            let n = format!("binary:{}", b.name);
            let install = format!(
                "build with `bash scripts/robot-build.sh` and install target/robot-bin/{} as {} (`{DEPLOY}`)",
                b.name, b.path
            );
            Some(match &b.linking {
                // The beacon is installed only with deploy --team-key.
                None if b.name == "nao-rs-beacon" => return None,
                None => fail(&n, format!("{} missing", b.path), install),
                Some(Err(e)) => fail(&n, e.clone(), install),
                Some(Ok(l)) if l.is_static() => pass(&n, format!("{}: {l}", b.path)),
                Some(Ok(l)) => fail(
                    &n,
                    format!("{}: {l}: it cannot start on the robot's 32-bit userland", b.path),
                    install,
                ),
            })
        })
        .collect()
}

/// `(major, minor)` of a kernel release (`4.4.86-rt99-aldebaran`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn kernel(f: &Facts) -> Check {
    const N: &str = "kernel";
    let pidfd = match f.pidfd {
        Pidfd::Present => "pidfd present".to_string(),
        Pidfd::Absent => {
            "pidfd absent (a kernel before 5.3: the guard watches the runtime through the exit watch)"
                .to_string()
        }
        Pidfd::Failed(e) => format!("pidfd refused (errno {e}: the guard uses the exit watch)"),
    };
    let detail = format!("{}, {pidfd}", f.kernel);
    match kernel_version(&f.kernel) {
        Some(v) if v >= (4, 4) => pass(N, detail),
        Some(_) => fail(
            N,
            detail,
            "nao-rs needs Linux 4.4 or later (docs/robot-system.md): update the robot's image",
        ),
        None => warn(N, detail, "`uname -r` should name the release"),
    }
}

fn page(f: &Facts) -> Vec<Check> {
    let r = match &f.page {
        PageFacts::Unreadable(e) => {
            let fix = "the guard and the runtime make it at start: `systemctl start nao-rs-guard.service \
                       nao-rs.service`; `journalctl -u nao-rs-guard.service` says why not";
            return vec![
                fail("page", e.clone(), fix),
                fail("heartbeat", "no page to read", "see page"),
                fail("guard", "no page to read", "see page"),
            ];
        }
        PageFacts::Read(r) => r,
    };
    let mut out = Vec::new();
    let reason = r.reason.as_deref().unwrap_or("unknown");
    out.push(match (&r.damage, r.armed) {
        (Some(d), _) => fail(
            "page",
            format!("{} is damaged ({d}): every holder reads it tripped page-lost", r.path),
            "its holders make it whole at their next check; `naoctl stop` makes it a tripped page now",
        ),
        (None, true) => pass("page", format!("{}: armed", r.path)),
        (None, false) if reason == "boot" => pass(
            "page",
            format!("{}: tripped (boot): every boot starts tripped", r.path),
        ),
        (None, false) => warn(
            "page",
            format!("{}: tripped ({reason})", r.path),
            "`naoctl status` says since when; after checking the robot and its surroundings, \
             `naoctl rearm`, then `nao-rs wake`",
        ),
    });
    let beat_fix = "`systemctl status nao-rs.service`; `journalctl -u nao-rs.service` says why";
    let gap = super::facts::HEARTBEAT_GAP.as_millis();
    out.push(match (r.driver, r.cycles) {
        (None, _) => fail("heartbeat", "no runtime registered in the page", beat_fix),
        (Some((pid, false)), _) => fail(
            "heartbeat",
            format!("the runtime the page names (pid {pid}) is gone"),
            beat_fix,
        ),
        (Some((pid, true)), (Some(a), Some(b))) if b > a => pass(
            "heartbeat",
            format!("runtime pid {pid}: cycle {a} -> {b} in {gap} ms"),
        ),
        (Some((pid, true)), (a, b)) => fail(
            "heartbeat",
            format!(
                "runtime pid {pid} alive but its heartbeat did not advance in {gap} ms (cycle {} -> {}): \
                 it hangs (the guard takes over)",
                a.map_or("none".into(), |c| c.to_string()),
                b.map_or("none".into(), |c| c.to_string())
            ),
            format!("{beat_fix}; `systemctl restart nao-rs.service`"),
        ),
    });
    out.push(match r.guard {
        None => fail(
            "guard",
            "no guard published in the page: nothing takes over a hang",
            "`systemctl start nao-rs-guard.service`; `journalctl -u nao-rs-guard.service`",
        ),
        Some((pid, false, _)) => fail(
            "guard",
            format!("the guard the page names (pid {pid}) is dead: nothing takes over a hang"),
            "`systemctl restart nao-rs-guard.service`; `journalctl -u nao-rs-guard.service`",
        ),
        Some((pid, true, holding)) => pass(
            "guard",
            format!(
                "pid {pid} alive, {}",
                if holding {
                    "holds the chest board (it took over)"
                } else {
                    "stands by"
                }
            ),
        ),
    });
    out
}

fn verified(f: &Facts) -> Check {
    const N: &str = "verified";
    let path = verify_mark::PATH;
    match &f.mark {
        Err(e) => fail(N, format!("cannot read the mark: {e}"), format!("`ls -l {path}`")),
        Ok(None) => warn(
            N,
            format!("no {path}: nao-rs's frames were never verified against this robot's HAL"),
            "`cargo nao-rs deploy --verify ROBOT` (while HAL still runs) verifies and records it",
        ),
        Ok(Some(text)) => match verify_mark::parse(text) {
            Err(e) => fail(N, e.to_string(), "`cargo nao-rs deploy --verify ROBOT`"),
            Ok(VerifyMark::Skipped { at }) => warn(
                N,
                format!("{SKIPPED} (at {at})"),
                "`cargo nao-rs deploy --verify ROBOT` verifies and records it",
            ),
            Ok(m @ VerifyMark::Verified { at, .. }) => pass(
                N,
                format!(
                    "frames verified byte for byte against this robot's HAL: capture sha256 {} (at {at})",
                    m.sha256_hex().unwrap_or_default()
                ),
            ),
        },
    }
}

#[cfg(test)]
mod tests;
