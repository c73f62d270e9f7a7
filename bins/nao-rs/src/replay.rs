//! `nao-rs replay FILE...`: replays recordings byte for byte through the
//! runtime's own start-up and cycle code (`nao_wire::replay`), one line per
//! file; exits 0 only if every file passed.

use std::path::PathBuf;
use std::process::ExitCode;

use nao_wire::replay::{replay_file, ReplayFailure};

/// Options of `nao-rs replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Recordings to replay (`recordings/*.rec`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Runs `nao-rs replay`.
pub fn main(args: ReplayArgs) -> ExitCode {
    let mut failed = 0usize;
    for path in &args.files {
        match replay_file(path) {
            Ok(r) => {
                let ms = r.elapsed.as_secs_f64() * 1000.0;
                let rate = if ms > 0.0 {
                    r.cycles as f64 / (ms / 1000.0)
                } else {
                    0.0
                };
                let note = match &r.startup_error {
                    Some(e) => format!(" (start-up ends as recorded: {e})"),
                    None => String::new(),
                };
                println!(
                    "PASS {}: {} calls matched, {} cycles, {ms:.1} ms ({rate:.0} cycles/s){note}",
                    path.display(),
                    r.calls,
                    r.cycles
                );
            }
            Err(ReplayFailure::Mismatch {
                path,
                mismatch,
                calls,
            }) => {
                failed += 1;
                println!(
                    "FAIL {}: line {} (after {calls} calls matched)",
                    path.display(),
                    mismatch.line
                );
                println!("  expected: {}", mismatch.expected);
                println!("  actual:   {}", mismatch.actual);
                match mismatch.offset {
                    Some(o) => println!("  first differing byte: offset {o}"),
                    None => println!(
                        "  first differing byte: none (the calls differ in kind or parameters)"
                    ),
                }
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {}: {e}", path.display());
            }
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "nao-rs replay: {failed} of {} files failed",
            args.files.len()
        );
        ExitCode::FAILURE
    }
}
