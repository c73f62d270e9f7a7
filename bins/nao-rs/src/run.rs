//! `nao-rs run`.

use std::process::ExitCode;

/// Options of `nao-rs run`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs run`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs run: not built yet");
    ExitCode::FAILURE
}
