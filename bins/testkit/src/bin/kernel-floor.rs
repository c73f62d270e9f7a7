//! `kernel-floor PROGRAM [ARGS...]`: runs PROGRAM under the kernel floor,
//! every system call newer than Linux 4.4 failing with ENOSYS, as on the
//! robot's kernel (see `testkit::install_kernel_floor`). A test tool of
//! the workspace, never shipped to a robot. As cargo's runner it puts a
//! whole test binary, and every program it starts, under the filter:
//!
//! ```text
//! CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=target/release/kernel-floor \
//!     cargo test --release -p nao-rs-guard --test restarts
//! ```

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: kernel-floor PROGRAM [ARGS...]\n\
    runs PROGRAM with every x86_64 system call newer than Linux 4.4 failing with ENOSYS";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if program == "--help" || program == "-h" {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = testkit::install_kernel_floor() {
        eprintln!("kernel-floor: cannot install the seccomp filter: {e} (a kernel without CONFIG_SECCOMP_FILTER?)");
        return ExitCode::from(125);
    }
    // exec returns only on failure.
    let e = Command::new(&program).args(args).exec();
    eprintln!(
        "kernel-floor: cannot run {}: {e}",
        program.to_string_lossy()
    );
    ExitCode::from(127)
}
