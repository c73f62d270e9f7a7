//! `nao-rs doctor [--json] [--page PATH]`: on the robot, read only, checks
//! that nao-rs is installed and running as deploy leaves it: the chest
//! board and who holds it, HAL/LoLA/NAOqi disabled, the units, the stop
//! socket, group `hal`, the udev rule, `/run/nao-rs`, the limits, the
//! installed programs static, the kernel, the page, its heartbeat, the
//! guard and the verification mark (docs/robot-system.md, "Check: nao-rs
//! doctor"). One line per check, `PASS|WARN|FAIL  name  detail`, and a
//! `fix:` line for each that is not PASS. Exit 0 only when no check fails.
//!
//! The facts are read at the edge ([`facts::gather`]) and judged by a pure
//! table ([`judge::judge`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

pub mod facts;
pub mod judge;

use judge::{Check, Status};

/// Arguments of `nao-rs doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// One JSON object: every check's name, status, detail and fix.
    #[arg(long)]
    json: bool,
    /// The death switch page (default: NAO_RS_PAGE of /etc/nao-rs/nao-rs.conf,
    /// else $NAO_RS_DEATHSWITCH, else /run/nao-rs/deathswitch).
    #[arg(long, value_name = "PATH")]
    page: Option<PathBuf>,
    /// Read every path under this directory instead of / (tests: a fake tree).
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    root: PathBuf,
}

/// Runs the checks and prints them; exit 0 when none fails, 1 otherwise.
pub fn main(args: DoctorArgs) -> ExitCode {
    let facts = facts::gather(&facts::Root(args.root), args.page.as_deref());
    let checks = judge::judge(&facts);
    if args.json {
        println!("{}", json(&checks));
    } else {
        print!("{}", human(&checks));
    }
    if checks.iter().any(|c| c.status == Status::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn counts(checks: &[Check]) -> [usize; 3] {
    let n = |s| checks.iter().filter(|c| c.status == s).count();
    [n(Status::Pass), n(Status::Warn), n(Status::Fail)]
}

/// The text: one line per check, names in a column, `fix:` under each
/// that is not PASS, and a summary line.
pub fn human(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        out += &format!("{}  {:width$}  {}\n", c.status.name(), c.name, c.detail);
        if let Some(fix) = &c.fix {
            out += &format!("      {:width$}  fix: {fix}\n", "");
        }
    }
    let [p, w, f] = counts(checks);
    out += &format!("nao-rs doctor: {p} pass, {w} warn, {f} fail\n");
    out
}

/// The JSON object: `{"ok", "pass", "warn", "fail", "checks": [{name,
/// status, detail, fix}]}`.
pub fn json(checks: &[Check]) -> serde_json::Value {
    let [p, w, f] = counts(checks);
    serde_json::json!({
        "ok": f == 0,
        "pass": p,
        "warn": w,
        "fail": f,
        "checks": checks.iter().map(|c| serde_json::json!({
            "name": c.name,
            "status": c.status.name(),
            "detail": c.detail,
            "fix": c.fix,
        })).collect::<Vec<_>>(),
    })
}
