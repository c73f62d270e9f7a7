//! `nao-rs record`.

use std::process::ExitCode;

/// Options of `nao-rs record`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs record`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs record: not built yet");
    ExitCode::FAILURE
}
