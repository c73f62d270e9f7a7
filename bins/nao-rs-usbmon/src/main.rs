//! `nao-rs-usbmon IN.pcap OUT.rec`: a Linux usbmon capture (pcap or pcapng)
//! into a recording (docs/usbmon.md). A laptop tool: captures are turned into
//! recordings off the robot, so nothing a robot installs reads pcap files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
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
    let written = if args.output.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(import.text.as_bytes())
    } else {
        std::fs::write(&args.output, &import.text)
    };
    if let Err(e) = written {
        eprintln!("nao-rs-usbmon: {output}: cannot write: {e}");
        return ExitCode::FAILURE;
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
