//! The runtime's status file: what `nao-rs run --status-file` writes and
//! `nao-rs demo` and `nao-rs-bench` read, one struct for all three.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::Handle;

/// The runtime's status file (`--status-file`): one JSON line, rewritten
/// every 100 ms, read by `nao-rs demo` and `nao-rs-bench`. Each field is
/// the runtime's [`Handle::status`] or [`Handle::switch`] when written, in the unit its
/// name ends with; the fields are in alphabetical order, the order of the
/// line since it was first written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatusFile {
    /// Cycles run.
    pub cycle: u64,
    /// `None` where the counting allocator is not installed.
    pub cycle_allocations: Option<u64>,
    /// The safety flags raised, by name.
    pub flags: Vec<String>,
    /// The last cycle's lateness.
    pub lateness_us: u64,
    /// Limp until woken (the wake latch).
    pub limp: bool,
    /// The largest lateness so far.
    pub max_lateness_us: u64,
    /// The last frame's largest stiffness, per mille.
    pub max_stiffness: u32,
    /// Cycles that overran their period.
    pub overruns: u64,
    /// The trip reason, by name, while tripped.
    pub reason: Option<String>,
    /// The switch as the last cycle read it.
    pub tripped: bool,
}

impl StatusFile {
    /// The status of the runtime behind `h` now.
    pub fn of(h: &Handle) -> StatusFile {
        let s = h.status();
        let sw = h.switch();
        StatusFile {
            cycle: s.cycles.load(Ordering::Relaxed),
            cycle_allocations: crate::kit::alloc::installed()
                .then(|| s.cycle_allocations.load(Ordering::Relaxed)),
            flags: deathswitch::flags::names(s.flags.load(Ordering::Relaxed))
                .map(String::from)
                .collect(),
            lateness_us: s.lateness_ns.load(Ordering::Relaxed) / 1000,
            limp: sw.limp,
            max_lateness_us: s.max_lateness_ns.load(Ordering::Relaxed) / 1000,
            max_stiffness: s.max_stiffness.load(Ordering::Relaxed),
            overruns: s.overruns.load(Ordering::Relaxed),
            reason: sw.reason.map(|r| r.name().to_string()),
            tripped: sw.tripped,
        }
    }

    /// Reads the file at `path`; `None` while it is missing or not a status.
    pub fn read(path: &Path) -> Option<StatusFile> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(text.trim()).ok()
    }

    /// Writes the file at `path` whole (a temp file renamed over it).
    pub fn write(&self, path: &Path) {
        let Ok(line) = serde_json::to_string(self) else {
            return;
        };
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, line + "\n").is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}
