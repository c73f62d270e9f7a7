//! Test support shared by the integration tests of every nao-rs program
//! and the bench, at the bottom of the workspace: it depends on no crate of
//! the house and works only through the programs' command lines and files.
//!
//! - [`bin`] finds (and if needed builds) a program of this workspace, so
//!   a test in one package can start the programs of the others;
//! - [`Rig`] starts the virtual robot on a private folder, and the guard
//!   ([`Rig::start_guard`]) and the runtime ([`Rig::start_runtime`],
//!   [`Runtime`]) on it;
//! - [`Proc`] is a child process killed when the test ends;
//! - [`wait_for`] and [`poll_for`] wait for a condition with a deadline;
//! - [`UnixServer`] answers on a Unix socket until dropped;
//! - [`install_kernel_floor`], [`under_kernel_floor`] and
//!   [`KERNEL_FLOOR_ENV`] run a program as on the robot's Linux 4.4: every
//!   newer system call fails with ENOSYS (a seccomp filter);
//! - [`recordings`] lists the worked examples; [`sh`], [`poke`] and
//!   [`page_path`] do damage from a second process.
//!
//! A test that counts allocations installs the kit's counting allocator
//! (`nao_kit::alloc::CountingAlloc`) itself.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;

mod floor;
mod proc;
mod rig;
mod serve;
mod wait;

pub use floor::{
    install_kernel_floor, kernel_floor_requested, under_kernel_floor, FLOOR_4_4, KERNEL_FLOOR_ENV,
    LAST_CALL_OF_4_4,
};
pub use proc::Proc;
pub use rig::{
    in_shell, ok, output, GuardBounds, Programs, Rig, RigSpec, Runtime, TEST_BEAT_TIMEOUT_MS,
    TEST_CONFIRM_WINDOW_MS,
};
pub use serve::UnixServer;
pub use wait::{poll_every, poll_for, wait_every, wait_for, POLL};

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("testkit lives at bins/testkit")
        .to_path_buf()
}

/// The folder the test binary was built into (`target/debug` or `target/release`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The path of the workspace binary `name` (for example `"nao-rs-sim"`),
/// built with `cargo build --bin NAME --features FEATURES` ([`FEATURES`])
/// in the test's own profile the first time a test process asks for it, so
/// the test never runs a stale binary. The features are the ones
/// `scripts/test.sh` builds the workspace's tests with (no robot build
/// enables them), so a program built here and one built by `cargo test`
/// are the same build and neither replaces the other with a different one. Panics with the
/// build's message if it does not build (tests only).
pub fn bin(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let dir = profile_dir();
    let path = dir.join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.iter().any(|b| b == name) {
        return path;
    }
    let profile = dir
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "--bin", name])
        .args(["--features", FEATURES]);
    if profile == "release" {
        cmd.arg("--release");
    } else if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    // Build into the same target folder as this test binary.
    if let Some(target) = dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "cargo build --bin {name} failed");
    assert!(path.exists(), "{} missing after build", path.display());
    built.push(name.to_string());
    path
}

/// The features every program of the workspace is built with for the
/// tests ([`bin`]): `nao-rs run --fault KIND`, and the world's mutations
/// (each off until a world selects it). The same as `FEATURES` in
/// `scripts/test.sh`, which checks that they agree: a program built here
/// with other features would be built again, in the middle of the tests.
pub const FEATURES: &str = "nao-rs/fault-injection,nao-rs-world/mutations";

/// The worked examples, `recordings/*.rec` of the workspace, sorted.
/// Panics when the folder cannot be read or holds none, so a test over
/// them never passes on an empty folder.
pub fn recordings() -> Vec<PathBuf> {
    let dir = workspace_root().join("recordings");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no recordings in {}", dir.display());
    files
}

/// A UDP port free on every address (bound on `0.0.0.0` and released).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// Runs `sh -c SCRIPT sh ARG` (the script's `$1` is `arg`, a second
/// process doing the damage), its stderr discarded; true when it exits 0.
pub fn sh(script: &str, arg: &Path) -> bool {
    shell(script, arg, Stdio::null()).success()
}

/// As [`sh`] with its stderr shown; panics when the script fails.
pub fn sh_ok(script: &str, arg: &Path) {
    let st = shell(script, arg, Stdio::inherit());
    assert!(st.success(), "{script} failed: {st}");
}

fn shell(script: &str, arg: &Path, stderr: Stdio) -> ExitStatus {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(arg)
        .stderr(stderr)
        .status()
        .expect("run sh")
}

/// Writes `bytes` at `offset` of the file at `path` from a second process
/// (`dd`, fed on its stdin), as damage done under a live mapping.
pub fn poke(path: &Path, offset: usize, bytes: &[u8]) {
    use std::io::Write;
    let mut dd = Command::new("dd")
        .arg(format!("of={}", path.display()))
        .args([
            "bs=1",
            &format!("seek={offset}"),
            "conv=notrunc",
            "status=none",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run dd");
    dd.stdin
        .take()
        .expect("dd's stdin")
        .write_all(bytes)
        .expect("write to dd");
    let st = dd.wait().expect("wait for dd");
    assert!(st.success(), "dd into {} failed: {st}", path.display());
}

/// A new private folder and the page path `deathswitch` in it (the page is
/// not created); the folder goes with the `TempDir`.
pub fn page_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("deathswitch");
    (dir, path)
}
