//! `nao-rs bench`.

use std::process::ExitCode;

/// Options of `nao-rs bench`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `nao-rs bench`.
pub fn main(_args: Args) -> ExitCode {
    eprintln!("nao-rs bench: not built yet");
    ExitCode::FAILURE
}
