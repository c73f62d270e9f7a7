//! `cargo nao-rs deploy ROBOT...`: installs nao-rs on robots over ssh, and
//! `--uninstall` undoes it (docs/deploy.md).
//!
//! Per robot, in its own thread: a probe (one remote sh script, read-only)
//! reports facts ([`facts`]); the pure [`plan::plan`] (or
//! [`plan::plan_uninstall`] from the manifest) decides every change;
//! `--dry-run` prints them and stops; otherwise [`script::render`] makes one
//! sh script of them, sent over ssh's stdin with the files inline; at the
//! end `nao-rs doctor` runs on the robot. Only the OpenSSH client on the
//! laptop (the team's ssh config and keys, `BatchMode=yes`: no password
//! prompt), and a POSIX sh with coreutils or busybox and systemd on the
//! robot.

pub mod facts;
pub mod plan;
pub mod script;
mod shell;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use facts::Facts;
use plan::{Bundle, BundleFile, Change, Content, Options, Verify};

/// The environment variable that puts every path the generated scripts
/// touch under a directory: set only by the tests (a fake root on the
/// test machine); unset, the scripts work on the robot's `/`.
pub const ROOT_ENV: &str = "NAO_RS_DEPLOY_ROOT";

/// The robot's four programs (`bash scripts/robot-build.sh`).
pub const PROGRAMS: [&str; 4] = ["nao-rs", "nao-rs-guard", "naoctl", "nao-rs-beacon"];

/// How the remote scripts get root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Become {
    /// As root directly when the ssh user is root, else `sudo -n`.
    Auto,
    /// Always `sudo -n` (passwordless sudo).
    Sudo,
    /// As the ssh user, whoever it is (root already; the tests).
    None,
}

/// The controller written to /etc/nao-rs/nao-rs.conf (`nao-rs run --controller`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Controller {
    /// LoLA's socket for the team's unmodified program (the default).
    Lola,
    /// nao-rs's own standing controller.
    Stand,
    /// Nothing commands the body.
    None,
}

impl Controller {
    fn value(self) -> &'static str {
        match self {
            Controller::Lola => "lola",
            Controller::Stand => "stand",
            Controller::None => "none",
        }
    }
}

/// `cargo nao-rs deploy`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct DeployArgs {
    /// The robots: ssh destinations (`[user@]host` or a Host of the team's
    /// ssh config), deployed in parallel.
    #[arg(required = true, value_name = "ROBOT")]
    pub robots: Vec<String>,
    /// Print every change and run nothing (the probe still reads the robot).
    #[arg(long)]
    pub dry_run: bool,
    /// Undo a deploy: restore every backup, remove what deploy created,
    /// re-enable what it disabled (HAL and LoLA run again).
    #[arg(long, conflicts_with_all = ["team_key", "verify", "skip_verify"])]
    pub uninstall: bool,
    /// The team key (docs/app.md): installed as /etc/nao-rs/team.key and
    /// the beacon enabled.
    #[arg(long, value_name = "FILE")]
    pub team_key: Option<PathBuf>,
    /// Capture the robot's HAL (`nao-rs capture`), replay it here
    /// (`nao-rs-usbmon verify`); nao-rs is enabled only when it replays
    /// byte for byte.
    #[arg(long, conflicts_with = "skip_verify")]
    pub verify: bool,
    /// Enable nao-rs without verifying its frames (`nao-rs doctor` says so).
    #[arg(long)]
    pub skip_verify: bool,
    /// The static robot binaries (`bash scripts/robot-build.sh`).
    #[arg(long, value_name = "DIR", default_value = "target/robot-bin")]
    pub bin_dir: PathBuf,
    /// The checkout's config/ directory.
    #[arg(long, value_name = "DIR", default_value = "config")]
    pub config_dir: PathBuf,
    /// The ssh program (OpenSSH's client, or a stand-in).
    #[arg(long, value_name = "PROGRAM", default_value = "ssh")]
    pub ssh: String,
    /// How the scripts get root on the robot.
    #[arg(long = "become", value_enum, default_value = "auto")]
    pub become_: Become,
    /// NAO_RS_CONTROLLER in /etc/nao-rs/nao-rs.conf.
    #[arg(long, value_enum, default_value = "lola")]
    pub controller: Controller,
}

fn read(path: &Path, fix: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}; {fix}", path.display()))
}

/// The config file's settings with `NAO_RS_CONTROLLER` set to `controller`.
pub fn settings(config: &str, controller: &str) -> String {
    let mut out = String::new();
    let mut set = false;
    for line in config.lines() {
        if line.trim_start().starts_with("NAO_RS_CONTROLLER=") {
            out.push_str(&format!("NAO_RS_CONTROLLER={controller}\n"));
            set = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !set {
        out.push_str(&format!("NAO_RS_CONTROLLER={controller}\n"));
    }
    out
}

/// A robot program must be a static x86_64 ELF program: no loader
/// (`PT_INTERP`), no shared library (`DT_NEEDED`) (`nao_kit::elf`).
fn check_static(path: &Path, bytes: &[u8], fix: &str) -> Result<(), String> {
    let why = match nao_kit::elf::read(bytes) {
        Err(e) => format!("is not a program the robot can run ({e})"),
        Ok(l) if !l.class64 || l.machine != 62 => format!("is a {l} program, not x86_64"),
        Ok(l) if !l.is_static() => format!("is {l}"),
        Ok(_) => return Ok(()),
    };
    Err(format!(
        "{} {why}: the robot needs static x86_64 programs; {fix}",
        path.display()
    ))
}

/// Reads and checks everything the laptop sends: the static binaries,
/// config/, the settings, the team key.
pub fn bundle(a: &DeployArgs) -> Result<Bundle, String> {
    let mut files = Vec::new();
    let build_fix = "build the robot's static binaries with `bash scripts/robot-build.sh` \
                     (into target/robot-bin/), or name their directory with --bin-dir";
    for p in PROGRAMS {
        let path = a.bin_dir.join(p);
        let bytes = read(&path, build_fix)?;
        check_static(&path, &bytes, build_fix)?;
        files.push(BundleFile {
            path: format!("/usr/local/bin/{p}"),
            mode: 0o755,
            owner: None,
            content: Content::new(bytes),
        });
    }
    let config_fix = "run from the checkout's top directory or name config/ with --config-dir";
    let mut config = |rel: &str, to: &str| -> Result<(), String> {
        let bytes = read(&a.config_dir.join(rel), config_fix)?;
        files.push(BundleFile {
            path: to.into(),
            mode: 0o644,
            owner: None,
            content: Content::new(bytes),
        });
        Ok(())
    };
    config(
        "systemd/nao-rs-stop.socket",
        "/etc/systemd/system/nao-rs-stop.socket",
    )?;
    config(
        "systemd/nao-rs-guard.service",
        "/etc/systemd/system/nao-rs-guard.service",
    )?;
    config(
        "systemd/nao-rs.service",
        "/etc/systemd/system/nao-rs.service",
    )?;
    if a.team_key.is_some() {
        config(
            "systemd/nao-rs-beacon.service",
            "/etc/systemd/system/nao-rs-beacon.service",
        )?;
    }
    config("tmpfiles.d/nao-rs.conf", "/etc/tmpfiles.d/nao-rs.conf")?;
    config("udev/99-nao-rs.rules", "/etc/udev/rules.d/99-nao-rs.rules")?;
    config("limits.d/nao-rs.conf", "/etc/security/limits.d/nao-rs.conf")?;
    let conf_path = a.config_dir.join("nao-rs.conf");
    let conf = read(&conf_path, config_fix)?;
    let conf = String::from_utf8(conf).map_err(|_| {
        format!(
            "{} is not UTF-8 text: restore it from git",
            conf_path.display()
        )
    })?;
    files.push(BundleFile {
        path: "/etc/nao-rs/nao-rs.conf".into(),
        mode: 0o644,
        owner: None,
        content: Content::new(settings(&conf, a.controller.value()).into_bytes()),
    });
    if let Some(key) = &a.team_key {
        let bytes = read(
            key,
            "give the team key file (docs/app.md, \"The team key\")",
        )?;
        if !(32..=1024).contains(&bytes.len()) {
            return Err(format!(
                "the team key {} has {} bytes, not 32..=1024: make one with \
                 `(umask 077 && head -c 32 /dev/urandom > team.key)` (docs/app.md)",
                key.display(),
                bytes.len()
            ));
        }
        files.push(BundleFile {
            path: "/etc/nao-rs/team.key".into(),
            mode: 0o600,
            owner: Some("nao".into()),
            content: Content::new(bytes),
        });
    }
    Ok(Bundle { files })
}

/// A remote run's result.
struct Remote {
    ok: bool,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

fn remote_command(become_: Become) -> &'static str {
    match become_ {
        Become::None => "sh -s",
        Become::Sudo => "sudo -n sh -s",
        Become::Auto => {
            "sh -c 'if [ \"$(id -u)\" = 0 ]; then exec sh -s; else exec sudo -n sh -s; fi'"
        }
    }
}

/// Runs `script` on `robot` through ssh's stdin.
fn run_remote(a: &DeployArgs, robot: &str, script: Vec<u8>) -> Result<Remote, String> {
    let mut child = Command::new(&a.ssh)
        .args([
            "-o",
            "BatchMode=yes",
            // Every wait has a deadline: a robot that does not answer in
            // 15 s, or stops answering for 30 s mid-deploy (powered off,
            // out of the network), ends its ssh with exit 255 instead of
            // holding deploy for ever.
            "-o",
            "ConnectTimeout=15",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=6",
            "-T",
            "--",
            robot,
            remote_command(a.become_),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {:?}: {e}; install OpenSSH's client (apt-get install openssh-client) \
                 or name it with --ssh",
                a.ssh
            )
        })?;
    let mut stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            // A robot that closed early: its stderr says why.
            let _ = s.write_all(&script);
        }
    });
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for {:?}: {e}", a.ssh))?;
    let _ = writer.join();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(Remote {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: out.stdout,
        stderr,
    })
}

fn remote_failure(robot: &str, what: &str, r: &Remote) -> String {
    let hint = if r.code == Some(255) {
        format!(
            "; ssh could not connect or log in: check that `ssh {robot}` works without a \
             prompt (the team's key and ~/.ssh/config; the robot's host key known: connect \
             once by hand)"
        )
    } else if r.stderr.contains("sudo") {
        format!(
            "; sudo -n needs a password: log in as root (`root@{robot}`, the team's key in \
             /root/.ssh/authorized_keys) or allow this user passwordless sudo"
        )
    } else {
        String::new()
    };
    format!(
        "{what} on {robot} failed (exit {}){hint}; its output: {}",
        r.code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "by a signal".into()),
        r.stderr.trim()
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Names the `nao-rs-usbmon` program to run, overriding the search (the
/// tests' stand-in; an unusual layout).
pub const USBMON_ENV: &str = "NAO_RS_USBMON";

/// Where `nao-rs-usbmon` is: `$NAO_RS_USBMON`, else beside this program,
/// else on PATH.
fn usbmon_program() -> PathBuf {
    if let Some(p) = std::env::var_os(USBMON_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("nao-rs-usbmon")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("nao-rs-usbmon"))
}

/// `--verify`: `nao-rs capture` on the robot while HAL runs, fetched over
/// ssh's stdout, replayed here with `nao-rs-usbmon verify`. The capture's
/// sha256 when it replays byte for byte.
fn capture_and_verify(
    a: &DeployArgs,
    robot: &str,
    bundle: &Bundle,
    log: &mut String,
) -> Result<[u8; 32], String> {
    let runtime = bundle
        .files
        .iter()
        .find(|f| f.path == "/usr/local/bin/nao-rs")
        .ok_or("the bundle has no nao-rs")?;
    // The capture runs from a temporary copy: nothing is installed yet.
    let script = format!(
        "d=$(mktemp -d) || exit 1\n\
         base64 -d >\"$d/nao-rs\" <<'NAO_RS_DEPLOY_EOF'\n{}NAO_RS_DEPLOY_EOF\n\
         chmod 755 \"$d/nao-rs\"\n\
         \"$d/nao-rs\" capture --out \"$d/capture.pcap\" >&2 || {{ rm -rf \"$d\"; exit 3; }}\n\
         cat \"$d/capture.pcap\"; rm -rf \"$d\"\n",
        script::base64_lines(&runtime.content.bytes)
    );
    log.push_str("   capturing HAL's start-up on the robot (nao-rs capture)...\n");
    let r = run_remote(a, robot, script.into_bytes())?;
    log.push_str(&indent(&r.stderr));
    if !r.ok || r.stdout.is_empty() {
        return Err(remote_failure(robot, "nao-rs capture", &r)
            + "; nao-rs is not enabled there (--skip-verify overrides, knowingly)");
    }
    let dir = PathBuf::from("target/nao-rs-deploy");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let safe: String = robot
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let file = dir.join(format!("{safe}-capture.pcap"));
    std::fs::write(&file, &r.stdout)
        .map_err(|e| format!("cannot write the capture to {}: {e}", file.display()))?;
    let sha: [u8; 32] = Sha256::digest(&r.stdout).into();
    log.push_str(&format!(
        "   capture: {} ({} bytes, sha256 {})\n",
        file.display(),
        r.stdout.len(),
        nao_kit::hex::hex(&sha)
    ));
    let usbmon = usbmon_program();
    let out = Command::new(&usbmon)
        .arg("verify")
        .arg(&file)
        .output()
        .map_err(|e| {
            format!(
                "cannot run {}: {e}; build it (`cargo build --release -p nao-rs-usbmon`, beside \
                 cargo-nao-rs) or put it on PATH",
                usbmon.display()
            )
        })?;
    log.push_str(&indent(&String::from_utf8_lossy(&out.stdout)));
    log.push_str(&indent(&String::from_utf8_lossy(&out.stderr)));
    if !out.status.success() {
        return Err(format!(
            "the capture {} does not replay byte for byte against nao-rs's frames \
             ({} verify exited {}; its report is above): nao-rs is not enabled on {robot}; \
             --skip-verify overrides, knowingly",
            file.display(),
            usbmon.display(),
            out.status
                .code()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "by a signal".into())
        ));
    }
    Ok(sha)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("   | {l}\n")).collect()
}

/// The robot's mark says `verified` and its installed nao-rs is the one
/// being deployed: a second `--verify` has nothing new to check (and HAL,
/// which a capture needs, is disabled by then).
fn verified_with_this_build(facts: &Facts, b: &Bundle) -> bool {
    let verified = matches!(
        facts.mark.as_deref().map(nao_kit::verify_mark::parse),
        Some(Ok(nao_kit::verify_mark::VerifyMark::Verified { .. }))
    );
    let same = b.files.iter().any(|f| {
        f.path == "/usr/local/bin/nao-rs"
            && matches!(facts.path(&f.path),
                facts::PathState::File { sha256, .. } if *sha256 == f.content.sha256)
    });
    verified && same
}

/// One robot's result: its log and its summary line.
pub struct Outcome {
    /// Everything to print for this robot.
    pub log: String,
    /// `Ok(summary)` or `Err(why)`.
    pub result: Result<String, String>,
}

fn deploy_one(a: &DeployArgs, robot: &str, root: &str, bundle: Option<&Bundle>) -> Outcome {
    let mut log = String::new();
    let result = deploy_one_inner(a, robot, root, bundle, &mut log);
    Outcome { log, result }
}

fn deploy_one_inner(
    a: &DeployArgs,
    robot: &str,
    root: &str,
    bundle: Option<&Bundle>,
    log: &mut String,
) -> Result<String, String> {
    let empty = Bundle::default();
    let b = bundle.unwrap_or(&empty);
    let probe = facts::probe_script(root, &plan::probe_paths(b), &plan::probe_units());
    let r = run_remote(a, robot, probe.into_bytes())?;
    if !r.ok {
        return Err(remote_failure(robot, "the probe", &r));
    }
    let facts = Facts::parse(&String::from_utf8_lossy(&r.stdout))
        .map_err(|e| format!("the probe's answer from {robot}: {e}"))?;
    let plan = if a.uninstall {
        plan::plan_uninstall(&facts)
    } else {
        let verify = if a.verify && a.dry_run {
            log.push_str("   (dry run: --verify would capture and replay first; not run)\n");
            Verify::Verified([0; 32])
        } else if a.verify && verified_with_this_build(&facts, b) {
            // HAL is off here now; the mark already covers this nao-rs.
            log.push_str(
                "   --verify: the robot's mark already says verified and its nao-rs is this \
                 build: the mark is kept, no new capture\n",
            );
            Verify::Unset
        } else if a.verify {
            Verify::Verified(capture_and_verify(a, robot, b, log)?)
        } else if a.skip_verify {
            Verify::Skip
        } else {
            Verify::Unset
        };
        plan::plan(
            &facts,
            b,
            &Options {
                beacon: a.team_key.is_some(),
                verify,
                now: now(),
            },
        )
    }?;
    log.push_str(&format!("   system: {}\n", plan.system));
    for n in &plan.notes {
        log.push_str(&format!("   note: {n}\n"));
    }
    if plan.changes.is_empty() {
        log.push_str("   nothing to change\n");
        if !a.uninstall && !a.dry_run {
            doctor(a, robot, root, log);
        }
        return Ok("nothing to change".into());
    }
    if plan.remount {
        log.push_str("   / is read-only: remounted read-write for the changes, read-only after\n");
    }
    let n = plan.changes.len();
    if a.dry_run {
        for c in &plan.changes {
            log.push_str(&format!("   would {c}\n"));
        }
        return Ok(format!("dry run: {n} changes (nothing done)"));
    }
    let r = run_remote(a, robot, script::render(&plan, root).into_bytes())?;
    log.push_str(&indent(&String::from_utf8_lossy(&r.stdout)));
    if !r.ok {
        return Err(remote_failure(robot, "the apply script", &r)
            + "; what was done is in the manifest: `cargo nao-rs deploy --uninstall` undoes it");
    }
    if a.uninstall {
        let restored: Vec<String> = plan
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Restore(p) | Change::RestoreLink { path: p, .. } => Some(p.clone()),
                Change::EnableAgain(u) => Some(format!("{u} enabled")),
                Change::Unmask(u) => Some(format!("{u} unmasked")),
                Change::StartUserUnits(us) => Some(format!("{} started", us.join(" "))),
                _ => None,
            })
            .collect();
        let removed = plan
            .changes
            .iter()
            .filter(|c| matches!(c, Change::Remove(_)))
            .count();
        let restored = if restored.is_empty() {
            "nothing to restore".to_string()
        } else {
            format!("restored {}", restored.join(", "))
        };
        return Ok(format!("uninstalled: {removed} files removed; {restored}"));
    }
    let d = doctor(a, robot, root, log);
    Ok(format!("deployed: {n} changes; doctor: {d}"))
}

/// Runs `nao-rs doctor` on the robot and prints it; says what it found.
fn doctor(a: &DeployArgs, robot: &str, root: &str, log: &mut String) -> String {
    let script = format!(
        "R={}\nif [ -x \"$R/usr/local/bin/nao-rs\" ]; then \"$R/usr/local/bin/nao-rs\" doctor 2>&1; \
         else echo \"no $R/usr/local/bin/nao-rs\"; exit 127; fi\n",
        shell::sq(root)
    );
    log.push_str("   nao-rs doctor:\n");
    match run_remote(a, robot, script.into_bytes()) {
        Err(e) => {
            log.push_str(&format!("   | {e}\n"));
            "not run".into()
        }
        Ok(r) => {
            let out = String::from_utf8_lossy(&r.stdout);
            log.push_str(&indent(&out));
            log.push_str(&indent(&r.stderr));
            if out.contains("unrecognized subcommand") || out.contains("invalid subcommand") {
                log.push_str(
                    "   (this nao-rs has no `doctor` yet: checks skipped; deploy goes on)\n",
                );
                "not in this build".into()
            } else if r.ok {
                "passed".into()
            } else {
                format!(
                    "failed (exit {}): see its lines above",
                    r.code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "by a signal".into())
                )
            }
        }
    }
}

/// Runs the deploy (or uninstall) on every robot in parallel; prints each
/// robot's log and one summary line per robot. `false` if any failed.
pub fn run(a: &DeployArgs) -> bool {
    let root = std::env::var(ROOT_ENV).unwrap_or_default();
    for (i, r) in a.robots.iter().enumerate() {
        if a.robots[..i].contains(r) {
            eprintln!(
                "cargo nao-rs deploy: robot {r:?} is named twice: two deploys at once on one \
                 robot would race; name each robot once"
            );
            return false;
        }
    }
    let bundle = if a.uninstall {
        None
    } else {
        match bundle(a) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("cargo nao-rs deploy: {e}");
                return false;
            }
        }
    };
    // Each robot's log is printed as soon as its deploy ends (the others
    // still run); the summary lines follow in the order the robots were named.
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = a
            .robots
            .iter()
            .map(|robot| {
                let (root, bundle) = (&root, bundle.as_ref());
                s.spawn(move || {
                    let o = deploy_one(a, robot, root, bundle);
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "== {robot}\n{}", o.log);
                    let _ = out.flush();
                    o
                })
            })
            .collect();
        handles
            .into_iter()
            .zip(&a.robots)
            .map(|(h, robot)| {
                h.join().unwrap_or_else(|_| Outcome {
                    log: String::new(),
                    result: Err(format!(
                        "{robot}: the deploy thread panicked (a bug: report it)"
                    )),
                })
            })
            .collect()
    });
    let mut ok = true;
    for (robot, o) in a.robots.iter().zip(outcomes) {
        match o.result {
            Ok(s) => println!("{robot}: {s}"),
            Err(e) => {
                ok = false;
                println!("{robot}: FAILED: {e}");
            }
        }
    }
    ok
}
