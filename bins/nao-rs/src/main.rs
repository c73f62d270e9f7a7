//! `nao-rs`: hosts the runtime (`run`), the demo with the virtual robot and
//! the guard (`demo`), byte-exact replay of recordings (`replay`), recording
//! of live sessions (`record`), waking the robot after a re-arm (`wake`),
//! bringing up one joint with a person at the robot (`bringup`) and
//! capturing HAL's USB traffic before nao-rs is enabled (`capture`). The
//! measurements (`nao-rs-bench`) and the import and verification of usbmon
//! captures (`nao-rs-usbmon`) are laptop programs of their own.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bringup;
mod capture;
mod chest_usb;
mod demo;
mod doctor;
mod record;
mod replay;
mod run;
mod wake;

/// The nao-rs runtime for the NAO V6 body.
#[derive(Parser)]
#[command(name = "nao-rs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Host the runtime on the chest board (or the virtual robot).
    Run(run::RunArgs),
    /// Start the virtual robot, the guard and the runtime together.
    Demo(demo::DemoArgs),
    /// Replay recordings byte for byte; exit 0 only if every file passes.
    Replay(replay::ReplayArgs),
    /// Record a live session in the recording format.
    Record(record::RecordArgs),
    /// Wake the robot after a re-arm (the robot stays limp until woken).
    Wake(wake::WakeArgs),
    /// Bring up one joint with a person at the robot (docs/bringup.md).
    Bringup(bringup::BringupArgs),
    /// Capture the chest board's USB traffic while HAL runs and restarts
    /// (usbmon, pcap), for `nao-rs-usbmon verify` (docs/usbmon.md).
    Capture(capture::CaptureArgs),
    /// Check the install on the robot, read only; exit 0 only when no check fails.
    Doctor(doctor::DoctorArgs),
}

/// Counts allocations per thread, so the runtime's status shows that its
/// cycle thread allocates nothing after start-up (`cycle_allocations`).
#[global_allocator]
static ALLOCATOR: nao_kit::alloc::CountingAlloc = nao_kit::alloc::CountingAlloc;

fn main() -> ExitCode {
    // The subcommands that end with a message on failure.
    let (name, result) = match Cli::parse().command {
        Cmd::Run(a) => ("run", run::main(a)),
        Cmd::Demo(a) => ("demo", demo::main(a)),
        Cmd::Record(a) => ("record", record::main(a)),
        Cmd::Wake(a) => ("wake", wake::main(a)),
        Cmd::Bringup(a) => ("bringup", bringup::main(a)),
        Cmd::Capture(a) => ("capture", capture::main(a)),
        Cmd::Replay(a) => return replay::main(a),
        Cmd::Doctor(a) => return doctor::main(a),
    };
    if let Err(e) = result {
        eprintln!("nao-rs {name}: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
