//! `nao-rs-usbmon IN.pcap OUT.rec`: a Linux usbmon capture (pcap or pcapng)
//! into a recording (docs/usbmon.md); `nao-rs-usbmon verify CAPTURE.pcap`:
//! that capture replayed against nao-rs's own frames. A laptop tool:
//! captures are turned into recordings off the robot, so nothing a robot
//! installs reads pcap files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nao_rs_usbmon::verify::{verify, VerifyOptions};
use nao_rs_usbmon::{import, ImportOptions};

/// The death switch at the start, for `--switch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    /// Armed.
    Armed,
    /// Tripped.
    Tripped,
}

/// A Linux usbmon capture of the chest board into a recording.
///
/// `nao-rs-usbmon verify CAPTURE.pcap [--device BUS:DEV] [--accepted V,...]`
/// replays the capture against nao-rs's own frames instead (exit 0: every
/// compared frame equal; 1: a difference, or nothing to compare; 2: the
/// capture cannot be read).
#[derive(Parser, Debug)]
#[command(name = "nao-rs-usbmon", version)]
struct Args {
    /// A usbmon capture (tcpdump -i usbmonN -s 0 -w IN.pcap, or Wireshark; pcap or pcapng).
    #[arg(value_name = "IN.pcap")]
    input: PathBuf,
    /// The recording to write (- for standard output).
    #[arg(value_name = "OUT.rec")]
    output: PathBuf,
    /// The chest board's bus and device number as lsusb shows them (default:
    /// the first device that sends the protocol's vendor requests).
    #[arg(long, value_name = "BUS:DEV", value_parser = parse_device)]
    device: Option<(u16, u8)>,
    /// The accepted configuration versions to write (not on USB).
    #[arg(long, value_name = "V[,V...]", value_delimiter = ',')]
    accepted: Option<Vec<u8>>,
    /// The death switch at the start to write (not on USB).
    #[arg(long, value_enum)]
    switch: Option<Switch>,
    /// Do not infer cycle lines.
    #[arg(long)]
    no_cycles: bool,
    /// Read the controller's commands back from the frames (command lines).
    #[arg(long, conflicts_with = "no_cycles")]
    commands: bool,
}

/// `nao-rs-usbmon verify`: the capture replayed against nao-rs's frames.
#[derive(Parser, Debug)]
#[command(name = "nao-rs-usbmon verify", version)]
struct VerifyArgs {
    /// A usbmon capture of HAL with a start-up in it (`nao-rs capture`).
    #[arg(value_name = "CAPTURE.pcap")]
    capture: PathBuf,
    /// The chest board's bus and device number (default: found by its
    /// requests and descriptors, followed when it re-enumerates).
    #[arg(long, value_name = "BUS:DEV", value_parser = parse_device)]
    device: Option<(u16, u8)>,
    /// The accepted configuration versions nao-rs will run with (default:
    /// nao-rs's default).
    #[arg(long, value_name = "V[,V...]", value_delimiter = ',')]
    accepted: Option<Vec<u8>>,
}

/// Runs `nao-rs-usbmon verify`: exit 0 only when at least one frame was
/// compared and every compared frame was equal, 1 on a difference (or none
/// compared), 2 when the capture cannot be read.
fn verify_main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let args = match VerifyArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if let Some(a) = &args.accepted {
        if let Err(e) = nao_wire::protocol::handshake::check_accepted(a) {
            eprintln!("nao-rs-usbmon verify: --accepted: {e}");
            return ExitCode::from(2);
        }
    }
    let name = args.capture.display().to_string();
    let bytes = match std::fs::read(&args.capture) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("nao-rs-usbmon verify: {name}: byte offset 0: cannot read: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = VerifyOptions {
        device: args.device,
        accepted: args.accepted,
    };
    match verify(&bytes, &args.capture, &opts) {
        Ok(report) => {
            print!("{}", report.render(&name));
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("nao-rs-usbmon verify: {name}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Where session `n` (1-based) of a capture goes: `OUT` for the first,
/// `OUT` with `.N` before its extension for the others (`hal.rec`,
/// `hal.2.rec`).
fn session_path(out: &Path, n: usize) -> PathBuf {
    if n == 1 {
        return out.to_path_buf();
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match out.extension() {
        Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{n}"),
    };
    out.with_file_name(name)
}

/// `BUS:DEV`, e.g. `1:5`.
fn parse_device(v: &str) -> Result<(u16, u8), String> {
    let (b, d) = v
        .split_once(':')
        .ok_or_else(|| format!("expected BUS:DEV, e.g. 1:5, not {v:?}"))?;
    let bus = b
        .parse::<u16>()
        .map_err(|_| format!("bus {b:?} is not a number 0..65535"))?;
    let dev = d
        .parse::<u8>()
        .map_err(|_| format!("device {d:?} is not a number 0..255"))?;
    Ok((bus, dev))
}

/// Runs `nao-rs-usbmon`: prints a one-line summary (and the warnings)
/// to standard error; exit 0 on success, 1 on a capture that cannot be read
/// or imported, 2 on bad arguments.
fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "verify") {
        // The usage line names the subcommand.
        let program = std::ffi::OsString::from("nao-rs-usbmon verify");
        return verify_main(std::iter::once(program).chain(std::env::args_os().skip(2)));
    }
    let args = Args::parse();
    if let Some(a) = &args.accepted {
        if let Err(e) = nao_wire::protocol::handshake::check_accepted(a) {
            eprintln!("nao-rs-usbmon: --accepted: {e}");
            return ExitCode::from(2);
        }
    }
    let opts = ImportOptions {
        device: args.device,
        cycles: !args.no_cycles,
        accepted: args.accepted,
        switch_armed: args.switch.map(|s| s == Switch::Armed),
        commands: args.commands,
    };
    let (input, output) = (args.input.display(), args.output.display());
    let bytes = match std::fs::read(&args.input) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("nao-rs-usbmon: {input}: cannot read: {e}");
            return ExitCode::FAILURE;
        }
    };
    let import = match import(&bytes, &opts) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("nao-rs-usbmon: {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = args.output.as_os_str() == "-";
    for (i, seg) in import.segments.iter().enumerate() {
        let path = session_path(&args.output, i + 1);
        let written = if stdout {
            use std::io::Write;
            std::io::stdout().write_all(seg.text.as_bytes())
        } else {
            std::fs::write(&path, &seg.text)
        };
        if let Err(e) = written {
            eprintln!("nao-rs-usbmon: {}: cannot write: {e}", path.display());
            return ExitCode::FAILURE;
        }
        if stdout {
            if import.segments.len() > 1 {
                eprintln!(
                    "nao-rs-usbmon: the capture holds {} sessions (HAL restarted); standard output \
                     gets the first, name an OUT.rec file to get each",
                    import.segments.len()
                );
            }
            break;
        }
        if import.segments.len() > 1 {
            eprintln!(
                "nao-rs-usbmon: session {} (from packet {}) -> {}",
                i + 1,
                seg.first_packet,
                path.display()
            );
        }
    }
    for w in &import.warnings {
        eprintln!("nao-rs-usbmon: warning: {w}");
    }
    eprintln!(
        "nao-rs-usbmon: {input} -> {output}: bus {} device {}, {} calls, {} cycles, {} warnings",
        import.device.0,
        import.device.1,
        import.calls,
        import.cycles,
        import.warnings.len()
    );
    ExitCode::SUCCESS
}
