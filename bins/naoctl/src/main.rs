//! The operator's tool for the death switch: `naoctl status [--json]`,
//! `naoctl stop`, `naoctl rearm [--yes]`. See docs/naoctl.md.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use deathswitch::{flags, Damage, Integrity, Page, PageError, Reason, Snapshot, TRIP_TIME_PENDING};

mod show;

/// The nao-rs death switch: read it, trip it, re-arm it.
#[derive(Parser, Debug)]
#[command(name = "naoctl", version, about)]
struct Cli {
    /// The page (default: $NAO_RS_DEATHSWITCH, else /run/nao-rs/deathswitch).
    #[arg(long, global = true, value_name = "PATH")]
    page: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Armed or tripped, why, since when; the runtime's heartbeat, the driver and the guard.
    /// Reads only: never creates, repairs or writes the page.
    Status {
        /// One JSON object on one line (the fields of docs/page.md).
        #[arg(long)]
        json: bool,
    },
    /// Trip the switch (reason `naoctl`).
    Stop,
    /// Re-arm the switch: a person's decision, after checking the robot and its surroundings.
    Rearm {
        /// Don't ask: you have checked the robot and its surroundings.
        #[arg(long)]
        yes: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = cli.page.clone().unwrap_or_else(deathswitch::default_path);
    // A subcommand's `Err` is a message: `naoctl: MESSAGE`, exit 1.
    let result = match cli.command {
        Command::Status { json } => status(&path, json),
        Command::Stop => stop(&path),
        Command::Rearm { yes } => rearm(&path, yes),
    };
    result.unwrap_or_else(|e| {
        eprintln!("naoctl: {e}");
        ExitCode::FAILURE
    })
}

/// Read only: `inspect` opens the file `O_RDONLY` and reads it with one
/// `pread`; nothing is created, mapped, repaired or written.
fn status(path: &Path, json: bool) -> Result<ExitCode, String> {
    let ins = deathswitch::inspect(path).map_err(|e| e.to_string())?;
    let now = deathswitch::monotonic_ns();
    let unix = deathswitch::unix_ns();
    let alive = show::Alive::of(&ins.snapshot);
    let chest = show::ChestButton::read(&status_file_path(path), &ins.snapshot, alive);
    if json {
        println!("{}", show::json(path, &ins, alive, &chest, now));
    } else {
        print!("{}", show::human(path, &ins, alive, &chest, now, unix));
    }
    match ins.damage {
        None => Ok(ExitCode::SUCCESS),
        Some(d) => Err(damage_message(path, d)),
    }
}

/// The runtime's status file for the page at `page`: `$NAO_RS_STATUS`,
/// else `status.json` next to the page (as the runtime writes it,
/// `docs/runtime.md`).
fn status_file_path(page: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("NAO_RS_STATUS") {
        return PathBuf::from(p);
    }
    match page.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.join("status.json"),
        _ => PathBuf::from("status.json"),
    }
}

/// What is wrong with the file at `path`, what it means and the fix.
fn damage_message(path: &Path, d: Damage) -> String {
    let p = path.display();
    let what = match d {
        Damage::OtherVersion { found } => PageError::Version {
            path: path.to_path_buf(),
            found,
        }
        .to_string(),
        Damage::Short { .. } | Damage::NoMagic => {
            format!("the file at {p} is not a death switch page ({d})")
        }
        _ => format!("the death switch page {p} is damaged ({d})"),
    };
    format!(
        "{what}. Every nao-rs holder counts it as lost (tripped page-lost) and makes it whole at \
         its next check; `naoctl stop` makes it a tripped page now. `naoctl status` changed \
         nothing"
    )
}

fn stop(path: &Path) -> Result<ExitCode, String> {
    let page = Page::open_to_trip(path).map_err(|e| {
        // Say whether what is at the path reads tripped anyway.
        match deathswitch::inspect(path) {
            Ok(ins) if !ins.snapshot.armed || ins.damage.is_some() => format!(
                "{e}\nnaoctl: the file at {} reads as tripped ({}) for every holder, but \
                 naoctl could not make it a page: fix the error above, then run \
                 `naoctl stop` again",
                path.display(),
                ins.snapshot.reason.map_or("page-lost", Reason::name)
            ),
            _ => e.to_string(),
        }
    })?;
    // Damage the opening rules let through (impossible values) is made
    // whole, tripped page-lost, before the trip.
    page.check();
    if page.trip(Reason::Naoctl) {
        println!(
            "naoctl: tripped the death switch {} (reason naoctl): every frame is all-off now",
            page.path().display()
        );
    } else {
        let why = page.reason().map_or("unknown", Reason::name);
        println!(
            "naoctl: the death switch {} was already tripped (reason {why}); it stays tripped",
            page.path().display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn rearm(path: &Path, yes: bool) -> Result<ExitCode, String> {
    let page = Page::open(path).map_err(|e| e.to_string())?;
    if page.check() != Integrity::Intact {
        if let Some(d @ (Damage::Path { .. } | Damage::Unbacked { .. })) = page.damage() {
            let fix = match d {
                Damage::Path { errno } | Damage::Unbacked { errno } if errno != 0 => {
                    deathswitch::fix(path, errno)
                }
                _ => format!("remove what is at {} (`rm -r` it)", path.display()),
            };
            eprintln!(
                "naoctl rearm: not re-armed: the death switch page {}: {d}. {fix}",
                path.display()
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    if !yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            eprintln!(
                "naoctl rearm: refusing to re-arm {} without a terminal to confirm on. Re-arming \
                 is a person's decision: run `naoctl rearm` on a terminal at the robot, or, after \
                 checking the robot and its surroundings, `naoctl rearm --yes`",
                page.path().display()
            );
            return Ok(ExitCode::from(2));
        }
        let s = page.snapshot();
        let why = s.reason.map_or("none", Reason::name);
        print!(
            "The death switch {} is {} (reason {why}).\nCheck the robot and its surroundings \
             first: nobody within reach, the robot lying or sitting safely, nothing in the way.\n\
             Re-arm the death switch? [y/N] ",
            page.path().display(),
            if s.armed { "armed" } else { "tripped" }
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).is_err() {
            eprintln!("naoctl rearm: could not read the answer; not re-armed");
            return Ok(ExitCode::FAILURE);
        }
        let answer = line.trim().to_ascii_lowercase();
        if answer != "y" && answer != "yes" {
            println!("naoctl: not re-armed; the switch stays tripped");
            return Ok(ExitCode::from(1));
        }
    }
    page.rearm();
    println!(
        "naoctl: re-armed the death switch {}. The robot stays limp until it is woken: \
         `nao-rs wake` (or the app or an API). Re-arming never resumes motion by itself.",
        page.path().display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The safety flag names of a snapshot.
fn flag_names(s: &Snapshot) -> Vec<String> {
    flags::names(s.safety_flags)
        .map(|n| n.into_owned())
        .collect()
}

/// The state's start in Unix ns (0: unknown).
fn since_unix_ns(s: &Snapshot) -> u64 {
    if s.armed {
        s.armed_at_unix_ns
    } else {
        s.tripped_at_unix_ns
    }
}

/// Monotonic age in ms of an event at `t_ns` (a pending trip time: none).
fn age_ms(now: u64, t_ns: u64) -> Option<u64> {
    (t_ns != TRIP_TIME_PENDING).then(|| now.saturating_sub(t_ns) / 1_000_000)
}
