//! The functional core of `cargo nao-rs deploy`: from what the probe found
//! ([`Facts`]), what the laptop brings ([`Bundle`]) and the options, the
//! list of every change ([`plan`]); from the manifest a previous deploy
//! left, the list that undoes it ([`plan_uninstall`]). Pure: no I/O, no
//! clock (time is passed in), table-tested.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use nao_kit::verify_mark::{self, VerifyMark};
use sha2::{Digest, Sha256};

use super::facts::{
    Facts, PathState, System, ALDEBARAN_USER_UNITS, FOREIGN_UNITS, OUR_UNITS, STATE_DIR,
    SYSTEM_UNIT_DIRS,
};

/// A file's bytes and their sha256 (what the probe compares).
#[derive(Clone, PartialEq, Eq)]
pub struct Content {
    /// The bytes.
    pub bytes: Arc<[u8]>,
    /// Their sha256, 64 lowercase hex digits.
    pub sha256: String,
}

impl Content {
    /// Wraps `bytes`, computing their sha256.
    pub fn new(bytes: Vec<u8>) -> Content {
        let sha256 = nao_kit::hex::hex(&Sha256::digest(&bytes));
        Content {
            bytes: bytes.into(),
            sha256,
        }
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Content({} bytes, sha256 {})",
            self.bytes.len(),
            &self.sha256[..12]
        )
    }
}

/// One file deploy puts on the robot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// Where on the robot.
    pub path: String,
    /// Its permission bits.
    pub mode: u32,
    /// Its owner when not root (`nao` for the team key).
    pub owner: Option<String>,
    /// Its bytes.
    pub content: Content,
}

/// Everything the laptop brings: binaries, `config/`, the settings, the
/// team key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    /// The files, in the order they are written.
    pub files: Vec<BundleFile>,
}

/// What deploy knows about the frames' verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// `--verify` ran and the capture (this sha256) replayed byte for byte.
    Verified([u8; 32]),
    /// `--skip-verify`.
    Skip,
    /// Neither flag: a mark already on the robot is kept; none is refused.
    Unset,
}

/// The options the plan depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// A team key comes along: install and enable the beacon.
    pub beacon: bool,
    /// The verification.
    pub verify: Verify,
    /// Now, in seconds since the Unix epoch (for the mark).
    pub now: u64,
}

/// How a written file is recorded in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Nothing was there: uninstall removes it.
    Created,
    /// Something was there: backed up first; uninstall restores it.
    Replaced,
    /// Deploy's own file from an earlier run: rewritten, no new backup.
    Updated,
}

impl Record {
    /// What the plan does to the path, as `--dry-run` says it.
    fn verb(self) -> &'static str {
        match self {
            Record::Created => "create",
            Record::Replaced => "replace (backed up first)",
            Record::Updated => "update",
        }
    }
}

/// One change on the robot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Create a directory (recorded; uninstall removes it if empty).
    MkDir(String),
    /// Create group `hal`.
    AddGroup,
    /// Add user `nao` to group `hal`.
    AddMember,
    /// Stop these user units of `nao` (Aldebaran's HAL, LoLA, NAOqi).
    StopUserUnits(Vec<String>),
    /// Remove a `*.wants` link of a user unit (disables it).
    RemoveLink {
        /// The link.
        path: String,
        /// Where it pointed (recorded, to put it back).
        target: String,
    },
    /// `systemctl disable --now` a system unit that was enabled.
    Disable(String),
    /// `systemctl mask --now` a static system unit (nothing to disable).
    Mask(String),
    /// Write a file (backing up what was there first).
    Write {
        /// Where.
        path: String,
        /// Permission bits.
        mode: u32,
        /// Owner when not root.
        owner: Option<String>,
        /// The bytes.
        content: Content,
        /// How the manifest records it.
        record: Record,
    },
    /// Make `path` a symbolic link to `target` (a unit alias; what was
    /// there backed up first).
    Link {
        /// The link.
        path: String,
        /// Where it points.
        target: String,
        /// How the manifest records it.
        record: Record,
    },
    /// `systemctl daemon-reload`.
    DaemonReload,
    /// `systemctl --user daemon-reload` as `nao`.
    UserDaemonReload,
    /// `udevadm control --reload` and trigger the chest board.
    UdevReload,
    /// `systemd-tmpfiles --create` of nao-rs's file (`/run/nao-rs` now).
    Tmpfiles,
    /// `systemctl enable --now` of these units (recorded).
    Enable(Vec<String>),
    /// `systemctl try-restart` (new binaries or settings).
    Restart(Vec<String>),
    /// Uninstall: `systemctl disable --now` of deploy's own units.
    StopOurs(Vec<String>),
    /// Uninstall: remove a file deploy created.
    Remove(String),
    /// Uninstall: put the backup back.
    Restore(String),
    /// Uninstall: put a removed `*.wants` link back.
    RestoreLink {
        /// The link.
        path: String,
        /// Its target.
        target: String,
    },
    /// Uninstall: `systemctl unmask` what deploy masked.
    Unmask(String),
    /// Uninstall: `systemctl enable --now` what deploy disabled.
    EnableAgain(String),
    /// Uninstall: start the user units deploy stopped.
    StartUserUnits(Vec<String>),
    /// Uninstall: take `nao` out of group `hal`.
    DelMember,
    /// Uninstall: remove group `hal`.
    DelGroup,
    /// Uninstall: remove the backups and the manifest.
    DropState,
    /// Uninstall: remove a directory deploy created (when empty).
    RmDir(String),
}

impl Change {
    /// The manifest's lines for this change (install only).
    pub fn manifest_lines(&self) -> Vec<String> {
        match self {
            Change::MkDir(p) => vec![format!("created-dir {p}")],
            Change::AddGroup => vec!["group-created hal".into()],
            Change::AddMember => vec!["member-added nao".into()],
            Change::StopUserUnits(us) => us.iter().map(|u| format!("stopped-user {u}")).collect(),
            Change::RemoveLink { path, target } => vec![format!("removed-link {path} {target}")],
            Change::Disable(u) => vec![format!("disabled {u}")],
            Change::Mask(u) => vec![format!("masked {u}")],
            Change::Write { path, record, .. } | Change::Link { path, record, .. } => {
                match record {
                    Record::Created => vec![format!("created {path}")],
                    Record::Replaced => vec![format!("replaced {path}")],
                    Record::Updated => vec![],
                }
            }
            Change::Enable(us) => us.iter().map(|u| format!("enabled {u}")).collect(),
            _ => vec![],
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::MkDir(p) => write!(f, "create directory {p}"),
            Change::AddGroup => write!(f, "create group hal"),
            Change::AddMember => write!(f, "add user nao to group hal"),
            Change::StopUserUnits(us) => write!(f, "stop nao's user units {}", us.join(" ")),
            Change::RemoveLink { path, target } => {
                write!(
                    f,
                    "disable a user unit: remove the link {path} (-> {target})"
                )
            }
            Change::Disable(u) => write!(f, "disable and stop {u}"),
            Change::Mask(u) => write!(f, "mask and stop {u} (static: nothing to disable)"),
            Change::Write {
                path,
                mode,
                owner,
                content,
                record,
            } => {
                write!(
                    f,
                    "{} {path} ({} bytes, mode {mode:o}{}, sha256 {})",
                    record.verb(),
                    content.bytes.len(),
                    owner
                        .as_ref()
                        .map(|o| format!(", owner {o}"))
                        .unwrap_or_default(),
                    &content.sha256[..12]
                )
            }
            Change::Link {
                path,
                target,
                record,
            } => write!(f, "{} {path} as a link to {target}", record.verb()),
            Change::DaemonReload => write!(f, "systemctl daemon-reload"),
            Change::UserDaemonReload => write!(f, "systemctl --user daemon-reload (as nao)"),
            Change::UdevReload => write!(f, "reload the udev rules and trigger the chest board"),
            Change::Tmpfiles => write!(f, "create /run/nao-rs (systemd-tmpfiles)"),
            Change::Enable(us) => write!(f, "enable and start {}", us.join(" ")),
            Change::Restart(us) => write!(f, "restart {} (new files)", us.join(" ")),
            Change::StopOurs(us) => write!(f, "disable and stop {}", us.join(" ")),
            Change::Remove(p) => write!(f, "remove {p} (deploy created it)"),
            Change::Restore(p) => write!(f, "restore {p} from its backup"),
            Change::RestoreLink { path, target } => {
                write!(f, "re-enable a user unit: link {path} -> {target}")
            }
            Change::Unmask(u) => write!(f, "unmask {u}"),
            Change::EnableAgain(u) => write!(f, "enable and start {u} again"),
            Change::StartUserUnits(us) => {
                write!(f, "start nao's user units {} again", us.join(" "))
            }
            Change::DelMember => write!(f, "take user nao out of group hal"),
            Change::DelGroup => write!(f, "remove group hal"),
            Change::DropState => write!(f, "remove deploy's backups and manifest ({STATE_DIR})"),
            Change::RmDir(p) => write!(f, "remove directory {p} (deploy created it) if empty"),
        }
    }
}

/// A plan: what the robot is, every change, and notes for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The system found.
    pub system: System,
    /// The changes, in order.
    pub changes: Vec<Change>,
    /// Things the person should know (nothing is changed for them).
    pub notes: Vec<String>,
    /// `/` must be remounted read-write for the changes (and back).
    pub remount: bool,
}

/// Aldebaran's LoLA unit, replaced by the stand-in.
pub const ALDEBARAN_LOLA: &str = "/nao/etc/systemd/user/lola.service";
/// A team image's LoLA unit: the administrator's copy overrides the
/// image's; deploy makes it an alias (a link) of [`SYSTEM_STAND_IN`].
pub const SYSTEM_LOLA: &str = "/etc/systemd/system/lola.service";
/// The unit that takes LoLA's place on a team image.
pub const SYSTEM_STAND_IN: &str = "/etc/systemd/system/nao-rs-lola.service";
/// What [`SYSTEM_LOLA`] links to (a name in the same directory).
pub const SYSTEM_STAND_IN_NAME: &str = "nao-rs-lola.service";

/// The unit that takes `lola.service`'s place: a team's program that says
/// `Requires=lola.service` (and `After=`) starts once nao-rs serves LoLA's
/// socket, as it started after LoLA before. A oneshot that waits for the
/// socket rather than an alias of nao-rs.service: `After=` an alias would
/// hold only until nao-rs's process started, not until the socket exists.
/// `system`: `nao-rs-lola.service`, a system unit (team image) that also
/// pulls in nao-rs, with `lola.service` an alias (link) of it, so that
/// `systemctl` and `nao-rs doctor` see LoLA's name as nao-rs's unit; else
/// the user unit `lola.service` of `nao` (Aldebaran), which cannot name a
/// system unit.
pub fn lola_stand_in(system: bool) -> Content {
    let order = if system {
        "Wants=nao-rs.service\nAfter=nao-rs.service\n"
    } else {
        ""
    };
    Content::new(
        format!(
            "# lola.service, written by `cargo nao-rs deploy`: LoLA's place, taken by\n\
             # nao-rs (`nao-rs run --controller lola` serves LoLA's socket /tmp/robocup).\n\
             # A robot program with Requires=lola.service and After=lola.service starts\n\
             # once the socket exists. `cargo nao-rs deploy --uninstall` puts LoLA back.\n\
             [Unit]\n\
             Description=LoLA's socket, served by nao-rs\n\
             {order}\n\
             [Service]\n\
             Type=oneshot\n\
             RemainAfterExit=yes\n\
             # Up to 30 s for nao-rs to bind the socket ($$: systemd's escape of $).\n\
             ExecStart=/bin/sh -c 'n=0; until [ -S /tmp/robocup ]; do n=$$((n+1)); [ $$n -lt 60 ] || exit 1; sleep 0.5; done'\n"
        )
        .into_bytes(),
    )
}

/// `lola.service` is already deploy's alias.
fn is_stand_in_link(state: &PathState) -> bool {
    matches!(state, PathState::Link(t) if t == SYSTEM_STAND_IN_NAME || t == SYSTEM_STAND_IN)
}

fn is_unit_path(p: &str) -> bool {
    p.starts_with("/etc/systemd/system/")
}

/// Every ancestor of `path`, outermost first, `/` excluded.
fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = path[at + 1..].find('/') {
        at += 1 + i;
        out.push(path[..at].to_string());
    }
    out
}

/// Every path the probe must report for [`plan`] to decide: the bundle's
/// files, the stand-ins, the mark, the state directory and all their
/// parents; the foreign units' files.
pub fn probe_paths(bundle: &Bundle) -> Vec<String> {
    let mut set = BTreeSet::new();
    let mut add = |p: &str| {
        for a in ancestors(p) {
            set.insert(a);
        }
        set.insert(p.to_string());
    };
    for f in &bundle.files {
        add(&f.path);
    }
    add(ALDEBARAN_LOLA);
    add(SYSTEM_LOLA);
    add(SYSTEM_STAND_IN);
    add(verify_mark::PATH);
    add(&format!("{STATE_DIR}/manifest"));
    for d in SYSTEM_UNIT_DIRS {
        for u in FOREIGN_UNITS {
            add(&format!("{d}/{u}"));
        }
    }
    for u in FOREIGN_UNITS {
        add(&format!("{ALDEBARAN_USER_UNITS}/{u}"));
    }
    set.into_iter().collect()
}

/// The units [`plan`] asks `systemctl is-enabled` about.
pub fn probe_units() -> Vec<&'static str> {
    FOREIGN_UNITS
        .iter()
        .chain(OUR_UNITS.iter())
        .copied()
        .collect()
}

/// The paths the manifest records as deploy's own (created or replaced).
fn manifest_files(facts: &Facts) -> BTreeSet<String> {
    facts
        .manifest
        .iter()
        .flatten()
        .filter_map(|l| {
            l.strip_prefix("created ")
                .or_else(|| l.strip_prefix("replaced "))
                .map(String::from)
        })
        .collect()
}

/// Every change that brings the robot to the bundle's state. `Err` names
/// what stops deploy and the fix (the caller adds the robot's name).
pub fn plan(facts: &Facts, bundle: &Bundle, opt: &Options) -> Result<Plan, String> {
    if !facts.missing_tools.is_empty() {
        return Err(format!(
            "the robot lacks {}: deploy needs a POSIX sh with coreutils or busybox \
             (base64, sha256sum, stat, readlink, grep) and systemd's systemctl",
            facts.missing_tools.join(", ")
        ));
    }
    if !facts.nao_user {
        return Err(
            "there is no user `nao` in /etc/passwd: nao-rs's units run as nao; \
                    create it (`useradd -m nao`) or deploy to a NAO image"
                .into(),
        );
    }
    let system = facts.system();
    let mut notes = Vec::new();
    let ours = manifest_files(facts);

    // The verification mark.
    let existing = facts.mark.as_deref().map(verify_mark::parse);
    let mark = match opt.verify {
        Verify::Verified(sha256) => Some(VerifyMark::Verified {
            sha256,
            at: opt.now,
        }),
        Verify::Skip => match existing {
            Some(Ok(_)) => None,
            _ => Some(VerifyMark::Skipped { at: opt.now }),
        },
        Verify::Unset => match existing {
            Some(Ok(_)) => None,
            Some(Err(e)) => {
                return Err(format!(
                    "{e} (it holds {:?})",
                    facts.mark.as_deref().unwrap_or_default()
                ))
            }
            None => {
                return Err(format!(
                    "nao-rs's frames were never verified against this robot's HAL \
                     ({} is absent): run with --verify (captures HAL's start-up and \
                     replays it on this laptop) or, knowingly, --skip-verify",
                    verify_mark::PATH
                ))
            }
        },
    };

    let mut pre = Vec::new();
    match &facts.hal_members {
        None => {
            pre.push(Change::AddGroup);
            pre.push(Change::AddMember);
        }
        Some(m) if !m.iter().any(|m| m == "nao") => pre.push(Change::AddMember),
        Some(_) => {}
    }

    let mut files: Vec<BundleFile> = bundle.files.clone();
    let mut alias = None;
    match system {
        System::Aldebaran => {
            let links: Vec<(String, String)> = facts
                .user_wants_links()
                .filter(|(p, _)| p.ends_with("/hal.service") || p.ends_with("/naoqi.service"))
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect();
            let stand_in = lola_stand_in(false);
            let lola_differs = !matches!(facts.path(ALDEBARAN_LOLA),
                PathState::File { sha256, .. } if *sha256 == stand_in.sha256);
            if !links.is_empty() || lola_differs {
                let present: Vec<String> = FOREIGN_UNITS
                    .iter()
                    .filter(|u| {
                        *facts.path(&format!("{ALDEBARAN_USER_UNITS}/{u}")) != PathState::Absent
                    })
                    .map(|u| u.to_string())
                    .collect();
                if !present.is_empty() {
                    pre.push(Change::StopUserUnits(present));
                }
            }
            for (path, target) in links {
                pre.push(Change::RemoveLink { path, target });
            }
            files.push(BundleFile {
                path: ALDEBARAN_LOLA.into(),
                mode: 0o644,
                owner: None,
                content: stand_in,
            });
        }
        System::TeamImage => {
            let present = |u: &str| {
                SYSTEM_UNIT_DIRS
                    .iter()
                    .any(|d| *facts.path(&format!("{d}/{u}")) != PathState::Absent)
            };
            for u in ["naoqi.service", "hal.service"] {
                if !present(u) {
                    continue;
                }
                match facts.unit(u) {
                    "enabled" | "enabled-runtime" | "linked" => pre.push(Change::Disable(u.into())),
                    "static" | "indirect" | "generated" => {
                        if matches!(
                            facts.path(&format!("/etc/systemd/system/{u}")),
                            PathState::File { .. }
                        ) {
                            notes.push(format!(
                                "{u} is static and its file is /etc/systemd/system/{u}: it cannot be \
                                 masked there; it starts only when another unit pulls it in"
                            ));
                        } else {
                            pre.push(Change::Mask(u.into()));
                        }
                    }
                    "disabled" | "masked" | "masked-runtime" => {}
                    other => notes.push(format!(
                        "systemctl is-enabled {u} said {other:?}: left as it is; \
                         check that it does not start (`systemctl status {u}`)"
                    )),
                }
            }
            let is_alias = is_stand_in_link(facts.path(SYSTEM_LOLA));
            if !is_alias && matches!(facts.unit("lola.service"), "enabled" | "enabled-runtime") {
                pre.push(Change::Disable("lola.service".into()));
            }
            files.push(BundleFile {
                path: SYSTEM_STAND_IN.into(),
                mode: 0o644,
                owner: None,
                content: lola_stand_in(true),
            });
            if !is_alias {
                let record = match facts.path(SYSTEM_LOLA) {
                    PathState::Dir | PathState::Other => {
                        return Err(format!(
                            "{SYSTEM_LOLA} on the robot is a directory or a special file: deploy \
                             makes it a link to {SYSTEM_STAND_IN_NAME}; move it away first"
                        ))
                    }
                    _ if ours.contains(SYSTEM_LOLA) => Record::Updated,
                    PathState::Absent => Record::Created,
                    _ => Record::Replaced,
                };
                alias = Some(Change::Link {
                    path: SYSTEM_LOLA.into(),
                    target: SYSTEM_STAND_IN_NAME.into(),
                    record,
                });
            }
        }
        System::Plain => {}
    }
    let lola_stops = pre.iter().any(|c| {
        matches!(c, Change::Disable(u) if u == "lola.service")
            || matches!(c, Change::StopUserUnits(us) if us.iter().any(|u| u == "lola.service"))
    });
    for p in &facts.requires_lola {
        if system != System::Plain {
            let now = if lola_stops {
                " (it stops with LoLA now: reboot, or start it again after deploy)"
            } else {
                ""
            };
            notes.push(format!(
                "{p} says Requires=lola.service: it now starts once nao-rs serves LoLA's \
                 socket (lola.service is deploy's stand-in){now}"
            ));
        }
    }
    for p in &facts.udev_final {
        notes.push(format!(
            "{p} assigns the chest board's GROUP or MODE with `:=` (final): 99-nao-rs.rules \
             cannot give it to group hal; change `:=` to `=` there for vendor ffff"
        ));
    }
    if let Some(m) = mark {
        files.push(BundleFile {
            path: verify_mark::PATH.into(),
            mode: 0o644,
            owner: None,
            content: Content::new(m.to_string().into_bytes()),
        });
    }

    let mut dirs = Vec::new();
    let mut writes = Vec::new();
    let mut planned_dirs = BTreeSet::new();
    for f in files {
        let state = facts.path(&f.path);
        if let PathState::File { sha256, mode } = state {
            if *sha256 == f.content.sha256 && *mode == f.mode {
                continue;
            }
        }
        let record = if ours.contains(&f.path) {
            Record::Updated
        } else {
            match state {
                PathState::Absent => Record::Created,
                PathState::File { .. } | PathState::Link(_) => Record::Replaced,
                PathState::Dir | PathState::Other => {
                    return Err(format!(
                        "{} on the robot is a directory or a special file: deploy writes a \
                         file there; move it away first",
                        f.path
                    ))
                }
            }
        };
        for a in ancestors(&f.path) {
            match facts.path(&a) {
                PathState::Absent => {
                    if planned_dirs.insert(a.clone()) {
                        dirs.push(Change::MkDir(a));
                    }
                }
                PathState::Dir => {}
                PathState::Link(_) => {} // /lib -> usr/lib and the like
                _ => {
                    return Err(format!(
                        "{a} on the robot is not a directory: deploy needs one there for {}; \
                         move it away first",
                        f.path
                    ))
                }
            }
        }
        writes.push(Change::Write {
            path: f.path,
            mode: f.mode,
            owner: f.owner,
            content: f.content,
            record,
        });
    }

    writes.extend(alias);
    let mut changes = Vec::new();
    let any = !pre.is_empty() || !writes.is_empty();
    let wanted: Vec<&str> = OUR_UNITS
        .iter()
        .copied()
        .filter(|u| opt.beacon || *u != "nao-rs-beacon.service")
        .collect();
    let to_enable: Vec<String> = wanted
        .iter()
        .filter(|u| facts.unit(u) != "enabled")
        .map(|u| u.to_string())
        .collect();
    if any || !to_enable.is_empty() {
        // Deploy's own state first: the manifest records every step as it goes.
        for a in ancestors(&format!("{STATE_DIR}/manifest")) {
            if *facts.path(&a) == PathState::Absent && !planned_dirs.contains(&a) {
                planned_dirs.insert(a.clone());
                changes.push(Change::MkDir(a));
            }
        }
    }
    changes.extend(pre.iter().cloned());
    changes.extend(dirs);
    let written = |pred: &dyn Fn(&str) -> bool| {
        writes.iter().any(
            |w| matches!(w, Change::Write { path, .. } | Change::Link { path, .. } if pred(path)),
        )
    };
    let units_changed = written(&is_unit_path)
        || pre
            .iter()
            .any(|c| matches!(c, Change::Disable(_) | Change::Mask(_)));
    let user_units_changed = written(&|p: &str| p.starts_with(ALDEBARAN_USER_UNITS))
        || pre.iter().any(|c| matches!(c, Change::RemoveLink { .. }));
    let udev_changed = written(&|p: &str| p.starts_with("/etc/udev/"));
    let tmpfiles_changed = written(&|p: &str| p.starts_with("/etc/tmpfiles.d/"));
    let programs_changed = written(&|p: &str| {
        p.starts_with("/usr/local/bin/")
            || p.starts_with("/etc/nao-rs/nao-rs.conf")
            || p == "/etc/nao-rs/team.key"
    }) || units_changed;
    changes.extend(writes);
    if units_changed {
        changes.push(Change::DaemonReload);
    }
    if user_units_changed {
        changes.push(Change::UserDaemonReload);
    }
    if udev_changed || pre.contains(&Change::AddGroup) {
        changes.push(Change::UdevReload);
    }
    if tmpfiles_changed || pre.contains(&Change::AddGroup) {
        changes.push(Change::Tmpfiles);
    }
    let running: Vec<String> = wanted
        .iter()
        .filter(|u| facts.unit(u) == "enabled" && u.ends_with(".service"))
        .map(|u| u.to_string())
        .collect();
    if programs_changed && !running.is_empty() {
        changes.push(Change::Restart(running));
    }
    if !to_enable.is_empty() {
        changes.push(Change::Enable(to_enable));
    }
    let remount = facts.root_read_only && !changes.is_empty();
    Ok(Plan {
        system,
        changes,
        notes,
        remount,
    })
}

/// Undoes what the manifest records, last change first. Without a
/// manifest the plan is empty (with a note). `Err` for a manifest line it
/// cannot read (naming the line and the fix).
pub fn plan_uninstall(facts: &Facts) -> Result<Plan, String> {
    let system = facts.system();
    let Some(lines) = &facts.manifest else {
        return Ok(Plan {
            system,
            changes: Vec::new(),
            notes: vec![format!(
                "no manifest ({STATE_DIR}/manifest): deploy has installed nothing here to undo"
            )],
            remount: false,
        });
    };
    let mut ours = Vec::new();
    let mut files = Vec::new();
    let mut again = Vec::new();
    let mut user_started = Vec::new();
    let mut groups = Vec::new();
    let mut dirs = Vec::new();
    let mut units_changed = false;
    let mut user_units_changed = false;
    let mut udev_changed = false;
    for (n, line) in lines.iter().enumerate() {
        let (kind, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let bad = || {
            format!(
                "{STATE_DIR}/manifest line {}: {line:?} is not a line deploy writes; \
                 undo that step by hand and delete the line",
                n + 1
            )
        };
        if rest.is_empty() || rest.contains('\n') {
            return Err(bad());
        }
        let file_touch = |p: &str, u: &mut bool, uu: &mut bool, ud: &mut bool| {
            *u |= is_unit_path(p);
            *uu |= p.starts_with(ALDEBARAN_USER_UNITS);
            *ud |= p.starts_with("/etc/udev/");
        };
        match kind {
            "created-dir" => dirs.push(Change::RmDir(rest.into())),
            "created" => {
                file_touch(
                    rest,
                    &mut units_changed,
                    &mut user_units_changed,
                    &mut udev_changed,
                );
                files.push(Change::Remove(rest.into()));
            }
            "replaced" => {
                file_touch(
                    rest,
                    &mut units_changed,
                    &mut user_units_changed,
                    &mut udev_changed,
                );
                files.push(Change::Restore(rest.into()));
            }
            "removed-link" => {
                let (p, t) = rest.split_once(' ').ok_or_else(bad)?;
                user_units_changed = true;
                files.push(Change::RestoreLink {
                    path: p.into(),
                    target: t.into(),
                });
            }
            "disabled" => {
                units_changed = true;
                again.push(Change::EnableAgain(rest.into()));
            }
            "masked" => {
                units_changed = true;
                again.insert(0, Change::Unmask(rest.into()));
            }
            "stopped-user" => user_started.push(rest.to_string()),
            "group-created" if rest == "hal" => groups.push(Change::DelGroup),
            "member-added" if rest == "nao" => groups.insert(0, Change::DelMember),
            "enabled" => {
                units_changed = true;
                ours.push(rest.to_string());
            }
            _ => return Err(bad()),
        }
    }
    let mut changes = Vec::new();
    if !ours.is_empty() {
        changes.push(Change::StopOurs(ours));
    }
    files.reverse();
    changes.extend(files);
    if units_changed {
        changes.push(Change::DaemonReload);
    }
    if user_units_changed {
        changes.push(Change::UserDaemonReload);
    }
    // Masks lifted before the enables (a unit masked and disabled: both).
    again.sort_by_key(|c| !matches!(c, Change::Unmask(_)));
    changes.extend(again);
    if !user_started.is_empty() {
        changes.push(Change::StartUserUnits(user_started));
    }
    changes.extend(groups);
    if udev_changed {
        changes.push(Change::UdevReload);
    }
    changes.push(Change::DropState);
    dirs.reverse();
    changes.extend(dirs);
    Ok(Plan {
        system,
        remount: facts.root_read_only,
        changes,
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, mode: u32, bytes: &[u8]) -> BundleFile {
        BundleFile {
            path: path.into(),
            mode,
            owner: None,
            content: Content::new(bytes.to_vec()),
        }
    }

    fn bundle() -> Bundle {
        Bundle {
            files: vec![
                file("/usr/local/bin/nao-rs", 0o755, b"\x7fELF nao-rs"),
                file("/etc/systemd/system/nao-rs.service", 0o644, b"[Unit]\n"),
                file("/etc/udev/rules.d/99-nao-rs.rules", 0o644, b"rule\n"),
                file("/etc/tmpfiles.d/nao-rs.conf", 0o644, b"d /run/nao-rs\n"),
                file(
                    "/etc/nao-rs/nao-rs.conf",
                    0o644,
                    b"NAO_RS_CONTROLLER=lola\n",
                ),
            ],
        }
    }

    fn dirs(f: &mut Facts, ds: &[&str]) {
        for d in ds {
            f.paths.insert(d.to_string(), PathState::Dir);
        }
    }

    /// A robot with the usual directories, user nao, no group hal, nothing
    /// of nao-rs.
    fn plain() -> Facts {
        let mut f = Facts {
            uid: Some(0),
            nao_user: true,
            ..Facts::default()
        };
        dirs(
            &mut f,
            &[
                "/usr",
                "/usr/local",
                "/usr/local/bin",
                "/etc",
                "/etc/systemd",
                "/etc/systemd/system",
                "/etc/udev",
                "/etc/udev/rules.d",
                "/etc/tmpfiles.d",
                "/var",
                "/var/lib",
            ],
        );
        for u in OUR_UNITS {
            f.units.insert(u.into(), "disabled".into());
        }
        f
    }

    fn aldebaran() -> Facts {
        let mut f = plain();
        f.root_read_only = true;
        f.hal_members = Some(vec!["nao".into()]);
        dirs(
            &mut f,
            &[
                "/nao",
                "/nao/etc",
                "/nao/etc/systemd",
                "/nao/etc/systemd/user",
            ],
        );
        let unit = PathState::File {
            sha256: "1".repeat(64),
            mode: 0o644,
        };
        for u in FOREIGN_UNITS {
            f.paths
                .insert(format!("{ALDEBARAN_USER_UNITS}/{u}"), unit.clone());
            f.paths.insert(
                format!("{ALDEBARAN_USER_UNITS}/aldebaran.target.wants/{u}"),
                PathState::Link(format!("../{u}")),
            );
        }
        f
    }

    fn team_image() -> Facts {
        let mut f = plain();
        f.hal_members = Some(vec![]);
        let unit = PathState::File {
            sha256: "2".repeat(64),
            mode: 0o644,
        };
        f.paths
            .insert("/usr/lib/systemd/system/hal.service".into(), unit.clone());
        f.paths
            .insert("/usr/lib/systemd/system/lola.service".into(), unit);
        f.units.insert("hal.service".into(), "enabled".into());
        f.units.insert("lola.service".into(), "enabled".into());
        f.requires_lola
            .push("/etc/systemd/system/team.service".into());
        f
    }

    fn skip() -> Options {
        Options {
            beacon: false,
            verify: Verify::Skip,
            now: 100,
        }
    }

    /// Each change in a few words (sha256 and sizes left out).
    fn tags(p: &Plan) -> Vec<String> {
        p.changes
            .iter()
            .map(|c| match c {
                Change::Write { path, record, .. } => format!("{record:?} {path}").to_lowercase(),
                Change::MkDir(d) => format!("mkdir {d}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    /// What the robot looks like after `plan` ran: the probe's view.
    fn apply(mut f: Facts, p: &Plan) -> Facts {
        for c in &p.changes {
            match c {
                Change::MkDir(d) => {
                    f.paths.insert(d.clone(), PathState::Dir);
                }
                Change::AddGroup => f.hal_members = Some(vec![]),
                Change::AddMember => f
                    .hal_members
                    .get_or_insert_with(Vec::new)
                    .push("nao".into()),
                Change::RemoveLink { path, .. } => {
                    f.paths.insert(path.clone(), PathState::Absent);
                }
                Change::Disable(u) => {
                    f.units.insert(u.clone(), "disabled".into());
                }
                Change::Mask(u) => {
                    f.units.insert(u.clone(), "masked".into());
                }
                Change::Enable(us) => {
                    for u in us {
                        f.units.insert(u.clone(), "enabled".into());
                    }
                }
                Change::Link { path, target, .. } => {
                    f.paths
                        .insert(path.clone(), PathState::Link(target.clone()));
                }
                Change::Write {
                    path,
                    mode,
                    content,
                    ..
                } => {
                    f.paths.insert(
                        path.clone(),
                        PathState::File {
                            sha256: content.sha256.clone(),
                            mode: *mode,
                        },
                    );
                    if path == verify_mark::PATH {
                        f.mark = Some(String::from_utf8_lossy(&content.bytes).trim().into());
                    }
                }
                _ => {}
            }
            for l in c.manifest_lines() {
                f.manifest.get_or_insert_with(Vec::new).push(l);
            }
        }
        if f.system() == System::TeamImage && is_stand_in_link(f.path(SYSTEM_LOLA)) {
            // An alias of the stand-in, which has no [Install].
            f.units.insert("lola.service".into(), "alias".into());
        }
        f
    }

    #[test]
    fn plan_plain_system_installs_everything_and_disables_nothing() {
        let p = plan(&plain(), &bundle(), &skip()).unwrap();
        assert_eq!(p.system, System::Plain);
        assert!(!p.remount);
        assert_eq!(
            tags(&p),
            [
                "mkdir /var/lib/nao-rs",
                "mkdir /var/lib/nao-rs/deploy",
                "AddGroup",
                "AddMember",
                "mkdir /etc/nao-rs",
                "created /usr/local/bin/nao-rs",
                "created /etc/systemd/system/nao-rs.service",
                "created /etc/udev/rules.d/99-nao-rs.rules",
                "created /etc/tmpfiles.d/nao-rs.conf",
                "created /etc/nao-rs/nao-rs.conf",
                "created /etc/nao-rs/verified",
                "DaemonReload",
                "UdevReload",
                "Tmpfiles",
                "Enable([\"nao-rs-stop.socket\", \"nao-rs-guard.service\", \"nao-rs.service\"])",
            ]
        );
        let mark = p.changes.iter().find_map(|c| match c {
            Change::Write { path, content, .. } if path == verify_mark::PATH => Some(content),
            _ => None,
        });
        assert_eq!(&*mark.unwrap().bytes, b"skipped at=100\n");
    }

    #[test]
    fn plan_aldebaran_disables_user_units_and_replaces_lola() {
        let p = plan(&aldebaran(), &bundle(), &skip()).unwrap();
        assert_eq!(p.system, System::Aldebaran);
        assert!(p.remount, "read-only root: remount");
        let t = tags(&p);
        let w = "/nao/etc/systemd/user/aldebaran.target.wants";
        let want_in_order = [
            "StopUserUnits([\"naoqi.service\", \"lola.service\", \"hal.service\"])".to_string(),
            format!("RemoveLink {{ path: \"{w}/hal.service\", target: \"../hal.service\" }}"),
            format!("RemoveLink {{ path: \"{w}/naoqi.service\", target: \"../naoqi.service\" }}"),
            "replaced /nao/etc/systemd/user/lola.service".into(),
            "UserDaemonReload".into(),
        ];
        let mut at = 0;
        for wnt in &want_in_order {
            let i = t[at..]
                .iter()
                .position(|x| x == wnt)
                .unwrap_or_else(|| panic!("{wnt} not after {at} in {t:#?}"));
            at += i + 1;
        }
        // The group exists with nao: nothing to add; lola's link stays (it
        // now starts the stand-in).
        assert!(
            !t.iter()
                .any(|x| x.contains("AddGroup") || x.contains("AddMember")),
            "{t:#?}"
        );
        assert!(
            !t.iter().any(|x| x.contains("wants/lola.service")),
            "{t:#?}"
        );
        assert!(!t.iter().any(|x| x.contains("Disable(")), "{t:#?}");
        assert!(t[t.len() - 1].starts_with("Enable("), "{t:#?}");
    }

    #[test]
    fn plan_team_image_disables_system_units_and_keeps_the_team_program() {
        let p = plan(&team_image(), &bundle(), &skip()).unwrap();
        assert_eq!(p.system, System::TeamImage);
        let t = tags(&p);
        for wnt in [
            "Disable(\"hal.service\")",
            "Disable(\"lola.service\")",
            "created /etc/systemd/system/nao-rs-lola.service",
            "Link { path: \"/etc/systemd/system/lola.service\", target: \"nao-rs-lola.service\", record: Created }",
            "AddMember",
        ] {
            assert!(t.iter().any(|x| x == wnt), "{wnt} in {t:#?}");
        }
        assert!(!t.iter().any(|x| x.contains("AddGroup")), "{t:#?}");
        // HAL and LoLA are stopped before nao-rs starts: one holder of the board.
        let at = |w: &str| t.iter().position(|x| x.starts_with(w)).unwrap();
        assert!(at("Disable(\"hal") < at("Enable(") && at("Disable(\"lola") < at("Enable("));
        assert_eq!(at("Enable("), t.len() - 1, "{t:#?}");
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("/etc/systemd/system/team.service")),
            "{:?}",
            p.notes
        );
        // A static HAL (no [Install]) is masked instead; one in /etc is left
        // with a note.
        let mut f = team_image();
        f.units.insert("hal.service".into(), "static".into());
        let t = tags(&plan(&f, &bundle(), &skip()).unwrap());
        assert!(t.iter().any(|x| x == "Mask(\"hal.service\")"), "{t:#?}");
        f.paths.insert(
            "/etc/systemd/system/hal.service".into(),
            PathState::File {
                sha256: "3".repeat(64),
                mode: 0o644,
            },
        );
        let p = plan(&f, &bundle(), &skip()).unwrap();
        assert!(!tags(&p).iter().any(|x| x.contains("hal.service")));
        assert!(
            p.notes.iter().any(|n| n.contains("cannot be masked")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn plan_already_installed_is_empty() {
        for (name, f) in [
            ("plain", plain()),
            ("aldebaran", aldebaran()),
            ("team", team_image()),
        ] {
            let first = plan(&f, &bundle(), &skip()).unwrap();
            assert!(!first.changes.is_empty(), "{name}");
            let after = apply(f, &first);
            let second = plan(&after, &bundle(), &skip()).unwrap();
            assert_eq!(
                second.changes,
                vec![],
                "{name}: a second deploy changes nothing"
            );
            assert!(!second.remount, "{name}");
            // Without --skip-verify the mark already there is kept.
            let unset = Options {
                verify: Verify::Unset,
                ..skip()
            };
            assert_eq!(
                plan(&after, &bundle(), &unset).unwrap().changes,
                vec![],
                "{name}"
            );
        }
    }

    #[test]
    fn plan_changed_binary_of_an_earlier_deploy_is_updated_and_restarted() {
        let f = plain();
        let first = plan(&f, &bundle(), &skip()).unwrap();
        let after = apply(f, &first);
        let mut b = bundle();
        b.files[0].content = Content::new(b"\x7fELF nao-rs v2".to_vec());
        let t = tags(&plan(&after, &b, &skip()).unwrap());
        assert_eq!(
            t,
            [
                "updated /usr/local/bin/nao-rs",
                "Restart([\"nao-rs-guard.service\", \"nao-rs.service\"])"
            ]
        );
    }

    #[test]
    fn plan_uninstall_from_the_manifest_undoes_each_system() {
        // Aldebaran.
        let f = aldebaran();
        let after = apply(f, &plan(&aldebaran(), &bundle(), &skip()).unwrap());
        let p = plan_uninstall(&after).unwrap();
        assert!(p.remount);
        let t = tags(&p);
        let w = "/nao/etc/systemd/user/aldebaran.target.wants";
        assert_eq!(
            t,
            [
                "StopOurs([\"nao-rs-stop.socket\", \"nao-rs-guard.service\", \"nao-rs.service\"])"
                    .to_string(),
                "Remove(\"/etc/nao-rs/verified\")".into(),
                "Restore(\"/nao/etc/systemd/user/lola.service\")".into(),
                "Remove(\"/etc/nao-rs/nao-rs.conf\")".into(),
                "Remove(\"/etc/tmpfiles.d/nao-rs.conf\")".into(),
                "Remove(\"/etc/udev/rules.d/99-nao-rs.rules\")".into(),
                "Remove(\"/etc/systemd/system/nao-rs.service\")".into(),
                "Remove(\"/usr/local/bin/nao-rs\")".into(),
                format!(
                    "RestoreLink {{ path: \"{w}/naoqi.service\", target: \"../naoqi.service\" }}"
                ),
                format!("RestoreLink {{ path: \"{w}/hal.service\", target: \"../hal.service\" }}"),
                "DaemonReload".into(),
                "UserDaemonReload".into(),
                "StartUserUnits([\"naoqi.service\", \"lola.service\", \"hal.service\"])".into(),
                "UdevReload".into(),
                "DropState".into(),
                "RmDir(\"/etc/nao-rs\")".into(),
                "RmDir(\"/var/lib/nao-rs/deploy\")".into(),
                "RmDir(\"/var/lib/nao-rs\")".into(),
            ]
        );
        // Team image: HAL and LoLA enabled again, the stand-in removed, the
        // member taken out (the group was there).
        let after = apply(
            team_image(),
            &plan(&team_image(), &bundle(), &skip()).unwrap(),
        );
        let t = tags(&plan_uninstall(&after).unwrap());
        for wnt in [
            "Remove(\"/etc/systemd/system/lola.service\")",
            "Remove(\"/etc/systemd/system/nao-rs-lola.service\")",
            "EnableAgain(\"hal.service\")",
            "EnableAgain(\"lola.service\")",
            "DelMember",
        ] {
            assert!(t.iter().any(|x| x == wnt), "{wnt} in {t:#?}");
        }
        assert!(!t.iter().any(|x| x == "DelGroup"), "{t:#?}");
        // Plain: the group deploy created goes too.
        let after = apply(plain(), &plan(&plain(), &bundle(), &skip()).unwrap());
        let t = tags(&plan_uninstall(&after).unwrap());
        let member = t.iter().position(|x| x == "DelMember").unwrap();
        assert_eq!(t[member + 1], "DelGroup");
    }

    #[test]
    fn plan_uninstall_without_manifest_or_with_a_foreign_line() {
        let p = plan_uninstall(&plain()).unwrap();
        assert!(p.changes.is_empty());
        assert!(p.notes[0].contains("no manifest"), "{:?}", p.notes);
        let mut f = plain();
        f.manifest = Some(vec!["created /a".into(), "rm -rf /".into()]);
        let e = plan_uninstall(&f).unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("rm -rf /") && e.contains("by hand"),
            "{e}"
        );
        f.manifest = Some(vec!["created".into()]);
        assert!(plan_uninstall(&f).is_err());
    }

    #[test]
    fn plan_verification_mark_rules() {
        let unset = Options {
            verify: Verify::Unset,
            ..skip()
        };
        let e = plan(&plain(), &bundle(), &unset).unwrap_err();
        assert!(e.contains("--verify") && e.contains("--skip-verify"), "{e}");
        let mut f = plain();
        f.mark = Some("garbage".into());
        let e = plan(&f, &bundle(), &unset).unwrap_err();
        assert!(
            e.contains("garbage") && e.contains(verify_mark::PATH),
            "{e}"
        );
        // --skip-verify rewrites a broken mark; --verify always writes.
        let mark = |p: &Plan| {
            p.changes.iter().find_map(|c| match c {
                Change::Write { path, content, .. } if path == verify_mark::PATH => {
                    Some(String::from_utf8_lossy(&content.bytes).into_owned())
                }
                _ => None,
            })
        };
        assert_eq!(
            mark(&plan(&f, &bundle(), &skip()).unwrap()).as_deref(),
            Some("skipped at=100\n")
        );
        f.mark = Some("skipped at=5".into());
        let verified = Options {
            verify: Verify::Verified([0xab; 32]),
            ..skip()
        };
        let m = mark(&plan(&f, &bundle(), &verified).unwrap()).unwrap();
        assert_eq!(m, format!("verified sha256={} at=100\n", "ab".repeat(32)));
    }

    #[test]
    fn plan_refuses_with_the_path_and_the_fix() {
        let mut f = plain();
        f.missing_tools = vec!["base64".into()];
        let e = plan(&f, &bundle(), &skip()).unwrap_err();
        assert!(e.contains("base64") && e.contains("busybox"), "{e}");
        let mut f = plain();
        f.nao_user = false;
        assert!(plan(&f, &bundle(), &skip())
            .unwrap_err()
            .contains("useradd"));
        let mut f = plain();
        f.paths
            .insert("/etc/nao-rs/nao-rs.conf".into(), PathState::Dir);
        f.paths.insert("/etc/nao-rs".into(), PathState::Dir);
        let e = plan(&f, &bundle(), &skip()).unwrap_err();
        assert!(
            e.contains("/etc/nao-rs/nao-rs.conf") && e.contains("move it away"),
            "{e}"
        );
        let mut f = plain();
        f.paths.insert("/etc/tmpfiles.d".into(), PathState::Other);
        let e = plan(&f, &bundle(), &skip()).unwrap_err();
        assert!(
            e.contains("/etc/tmpfiles.d on the robot is not a directory"),
            "{e}"
        );
    }

    #[test]
    fn plan_beacon_only_with_a_team_key() {
        let with = Options {
            beacon: true,
            ..skip()
        };
        let t = tags(&plan(&plain(), &bundle(), &with).unwrap());
        assert!(
            t.last().unwrap().contains("nao-rs-beacon.service"),
            "{t:#?}"
        );
        let t = tags(&plan(&plain(), &bundle(), &skip()).unwrap());
        assert!(!t.last().unwrap().contains("beacon"), "{t:#?}");
    }

    #[test]
    fn probe_paths_cover_parents_and_state() {
        let p = probe_paths(&bundle());
        for want in [
            "/usr",
            "/usr/local/bin",
            "/etc/nao-rs",
            "/var/lib/nao-rs/deploy",
            SYSTEM_LOLA,
            ALDEBARAN_LOLA,
            "/lib/systemd/system/hal.service",
        ] {
            assert!(p.iter().any(|x| x == want), "{want}");
        }
        assert_eq!(ancestors("/a/b/c"), ["/a", "/a/b"]);
        assert!(ancestors("/a").is_empty());
    }
}
