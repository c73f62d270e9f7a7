//! `nao-rs replay`.

use std::process::ExitCode;

/// Options of `nao-rs replay`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs replay`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs replay: not built yet");
    ExitCode::FAILURE
}
