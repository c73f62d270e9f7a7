//! Formatting `naoctl status`: the human text and the JSON object.

use std::path::Path;

use deathswitch::process::ProcessIdentity;
use deathswitch::{Inspection, Motion, Reason, Snapshot};
use serde_json::json;

use crate::{age_ms, flag_names, since_unix_ns};

/// Whether the processes the page names still run (pid and start time:
/// a reused pid is not the process the page named). `None`: none named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alive {
    /// The runtime (`driver_pid`, `driver_start`).
    pub driver: Option<bool>,
    /// The guard (`guard_pid`, `guard_start`).
    pub guard: Option<bool>,
}

impl Alive {
    /// Looks the page's identities up in `/proc` (read only).
    pub fn of(s: &Snapshot) -> Alive {
        let alive =
            |pid: Option<u32>, start| pid.map(|pid| ProcessIdentity { pid, start }.is_alive());
        Alive {
            driver: alive(s.driver_pid, s.driver_start),
            guard: alive(s.guard_pid, s.guard_start),
        }
    }
}

/// The chest button mode of the runtime the page names, from its status
/// file (`docs/runtime.md`, field `chest_button`): `trip` or `hold:MS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChestButton {
    /// No live runtime is named in the page.
    NoRuntime,
    /// The status file is missing, unreadable, of another process or has no
    /// `chest_button` (a runtime from before the field).
    Unknown {
        /// The status file's path.
        path: String,
    },
    /// The runtime's mode as it spells it.
    Mode(String),
}

impl ChestButton {
    /// Reads the status file at `status` (read only) for the runtime the
    /// page names: its `pid` must be the page's live driver.
    pub fn read(status: &Path, s: &Snapshot, alive: Alive) -> ChestButton {
        if alive.driver != Some(true) {
            return ChestButton::NoRuntime;
        }
        let unknown = || ChestButton::Unknown {
            path: status.display().to_string(),
        };
        let Ok(text) = std::fs::read_to_string(status) else {
            return unknown();
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
            return unknown();
        };
        let pid = v.get("pid").and_then(serde_json::Value::as_u64);
        let mode = v.get("chest_button").and_then(serde_json::Value::as_str);
        match (pid, mode) {
            (Some(p), Some(m)) if s.driver_pid.map(u64::from) == Some(p) && !m.is_empty() => {
                ChestButton::Mode(m.to_string())
            }
            _ => unknown(),
        }
    }

    /// The mode's name (`trip`, `hold:MS`), if known.
    fn mode(&self) -> Option<&str> {
        match self {
            ChestButton::Mode(m) => Some(m),
            _ => None,
        }
    }

    /// The hold time of `hold:MS`, ms.
    fn hold_ms(&self) -> Option<u64> {
        self.mode()?.strip_prefix("hold:")?.parse().ok()
    }

    /// In words, for the human form.
    fn text(&self) -> String {
        match (self, self.hold_ms()) {
            (ChestButton::NoRuntime, _) => "no runtime runs".into(),
            (ChestButton::Unknown { path }, _) => {
                format!("unknown (no status file of the running runtime at {path})")
            }
            (ChestButton::Mode(m), _) if m == "trip" => "trip: every press stops the robot".into(),
            (ChestButton::Mode(m), Some(ms)) => format!(
                "{m}: a press held {ms} ms stops the robot; shorter presses reach the program only"
            ),
            (ChestButton::Mode(m), None) => m.clone(),
        }
    }
}

/// What the robot's joints may do, in words, for a sound page: the
/// runtime's motion state, unless no runtime runs.
fn motion_text(s: &Snapshot, alive: Alive) -> &'static str {
    if alive.driver != Some(true) {
        return "no runtime runs";
    }
    match s.motion {
        Motion::None => "the runtime has not said yet",
        Motion::LimpTripped => "limp (tripped)",
        Motion::LimpWaitingForWake => "limp, waiting for a wake (`nao-rs wake`)",
        Motion::Awake => "awake: the controller's commands pass",
        Motion::BringUp => "bring-up: one joint at a time",
    }
}

/// The JSON object of `naoctl status --json` (docs/page.md fields,
/// plus extras).
pub fn json(
    path: &Path,
    ins: &Inspection,
    alive: Alive,
    chest: &ChestButton,
    now: u64,
) -> serde_json::Value {
    let s = &ins.snapshot;
    let since_ns = since_unix_ns(s);
    // Any damage counts as tripped page-lost, whatever the fields say.
    let armed = s.armed && ins.damage.is_none();
    let reason = if ins.damage.is_some() {
        Some(Reason::PageLost)
    } else {
        s.reason
    };
    json!({
        "state": if armed { "armed" } else { "tripped" },
        "reason": reason.map(Reason::name),
        "since": (since_ns != 0).then_some(since_ns / 1_000_000_000),
        "since_unix_ns": (since_ns != 0).then_some(since_ns),
        "tripped_ms_ago": if s.armed { None } else { age_ms(now, s.tripped_at_ns) },
        "driver_pid": s.driver_pid,
        "driver_alive": alive.driver,
        "motion": if alive.driver == Some(true) { s.motion.name() } else { Motion::None.name() },
        "chest_button": chest.mode(),
        "chest_button_hold_ms": chest.hold_ms(),
        "limp_waiting_for_wake": alive.driver == Some(true) && s.motion == Motion::LimpWaitingForWake,
        "wake_generation": if ins.damage.is_none() { s.wake_generation() } else { None },
        "cycle": s.last_cycle,
        "heartbeat_age_ms": s.last_beat_ns.map(|t| now.saturating_sub(t) / 1_000_000),
        "all_off_confirmed_cycle": s.all_off_confirmed_cycle,
        "trip_count": s.trip_count,
        "guard": { "pid": s.guard_pid, "holding_board": s.guard_holding, "alive": alive.guard },
        "safety_flags": flag_names(s),
        "safety_flags_bits": s.safety_flags,
        "magic_ok": s.magic_ok,
        "integrity": if ins.damage.is_none() { "intact" } else { "damaged" },
        "damage": ins.damage.map(|d| d.name()),
        "damage_text": ins.damage.map(|d| d.to_string()),
        "file_len": ins.len,
        "layout_version": s.version,
        "path": path.display().to_string(),
    })
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix ns (days-from-civil inverse, Howard
/// Hinnant's algorithm).
pub fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn ago(ms: u64) -> String {
    if ms < 10_000 {
        format!("{ms} ms ago")
    } else if ms < 600_000 {
        format!("{} s ago", ms / 1000)
    } else {
        format!("{} min ago", ms / 60_000)
    }
}

/// The human text of `naoctl status`.
pub fn human(
    path: &Path,
    ins: &Inspection,
    alive: Alive,
    chest: &ChestButton,
    now: u64,
    unix: u64,
) -> String {
    let s = &ins.snapshot;
    let mut out = String::new();
    let since_ns = since_unix_ns(s);
    let since = if since_ns == 0 {
        String::new()
    } else {
        let ms = unix.saturating_sub(since_ns) / 1_000_000;
        format!(" since {} ({})", utc(since_ns), ago(ms))
    };
    if s.armed && ins.damage.is_none() {
        out += &format!("death switch: ARMED{since}\n");
    } else if ins.damage.is_some() {
        out += "death switch: TRIPPED (page-lost: the page is damaged)\n";
    } else {
        let why = s.reason.map_or("unknown", Reason::name);
        out += &format!("death switch: TRIPPED ({why}){since}\n");
    }
    out += &format!("  page: {}", path.display());
    match ins.damage {
        None => out += "\n",
        Some(d) => out += &format!(" (damaged: {d})\n"),
    }
    out += &format!(
        "  trip count: {} (armed -> tripped since the page was made whole)\n",
        s.trip_count
    );
    if ins.damage.is_none() {
        if let Some(g) = s.wake_generation() {
            out += &format!("  wake generation: {g} (a wake counts in this armed epoch only)\n");
        }
    }
    out += &format!("  motion: {}\n", motion_text(s, alive));
    out += &format!("  chest button: {}\n", chest.text());
    match (s.last_cycle, s.last_beat_ns) {
        (Some(c), Some(t)) => {
            let conf = s
                .all_off_confirmed_cycle
                .map_or("none".to_string(), |a| a.to_string());
            out += &format!(
                "  heartbeat: cycle {c}, {}; all-off confirmed up to cycle {conf}\n",
                ago(now.saturating_sub(t) / 1_000_000)
            );
        }
        _ => out += "  heartbeat: none since the page was cleared\n",
    }
    match (s.driver_pid, alive.driver) {
        (Some(p), Some(false)) => {
            out += &format!("  driver pid: {p} (gone: no such process now)\n")
        }
        (Some(p), _) => out += &format!("  driver pid: {p}\n"),
        (None, _) => out += "  driver pid: none\n",
    }
    match s.guard_pid {
        Some(p) => {
            let holds = if s.guard_holding {
                "holds the chest board"
            } else {
                "does not hold the chest board"
            };
            if alive.guard == Some(false) {
                out += &format!(
                    "  guard: pid {p} is DEAD (no such process now): nothing takes over a hang; \
                     `systemctl restart nao-rs-guard`\n"
                );
            } else {
                out += &format!("  guard: pid {p}, {holds}\n");
            }
        }
        None => out += "  guard: none published\n",
    }
    let names = flag_names(s);
    if names.is_empty() {
        out += "  safety: no flags\n";
    } else {
        out += &format!("  safety: {}\n", names.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            super::utc(1_796_220_040 * 1_000_000_000),
            "2026-12-02 14:00:40 UTC"
        );
        assert_eq!(
            super::utc(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00 UTC"
        );
    }
}
