//! `nao-rs wake`.

use std::process::ExitCode;

/// Options of `nao-rs wake`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs wake`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs wake: not built yet");
    ExitCode::FAILURE
}
