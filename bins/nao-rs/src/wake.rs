//! `nao-rs wake`: wake the robot after a re-arm. Never re-arms: while the
//! switch is tripped the controller ignores it.

use std::path::PathBuf;

use nao_actors::runtime::wake;

/// Options of `nao-rs wake`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The wake socket (default: $NAO_RS_WAKE_SOCKET, or wake.sock next to
    /// the death switch page).
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

/// Runs `nao-rs wake`.
pub fn main(args: Args) -> Result<(), String> {
    let path = args
        .socket
        .unwrap_or_else(|| wake::socket_path(&deathswitch::default_path()));
    wake::send(&path).map_err(|e| e.to_string())?;
    println!("woke the controller through {}", path.display());
    Ok(())
}
