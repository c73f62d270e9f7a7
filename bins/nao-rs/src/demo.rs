//! `nao-rs demo`.

use std::process::ExitCode;

/// Options of `nao-rs demo`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs demo`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs demo: not built yet");
    ExitCode::FAILURE
}
