//! Test support shared by the integration tests of every nao-rs program.
//!
//! [`bin`] finds (and if needed builds) a binary of this workspace, so a test
//! in one package can start the programs of the others: the virtual robot,
//! the guard, the runtime, naoctl and the guard's test runtime
//! ([`TEST_RUNTIME`]). [`Proc`] kills a child process when the test ends,
//! [`recordings`] lists the worked examples, [`allocations`] counts what a
//! piece of code allocates.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

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
/// built with `cargo build --bin NAME` in the test's own profile the first
/// time a test process asks for it, so the test never runs a stale binary.
/// Panics with the build's message if it does not build (tests only).
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
        .args(["build", "--quiet", "--bin", name]);
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

/// The name of the guard's test runtime, a runtime that can ignore the
/// switch (`src/bin/nao-rs-guard-test-runtime.rs`): `bin(TEST_RUNTIME)`.
/// It is a binary of this test-only package, so no install of the guard
/// can put it on a robot.
pub const TEST_RUNTIME: &str = "nao-rs-guard-test-runtime";

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

/// The runtime's counting allocator (`nao_kit::alloc`), for a test
/// that counts allocations. Install it in the test file with
/// `#[global_allocator] static A: testkit::CountingAlloc = testkit::CountingAlloc;`
pub use nao_kit::alloc::CountingAlloc;

/// Allocations made by `f` on the calling thread. Panics when
/// [`CountingAlloc`] is not the global allocator (the count would be 0
/// whatever `f` does).
pub fn allocations(f: impl FnOnce()) -> u64 {
    let before = thread_allocations();
    f();
    thread_allocations() - before
}

/// Allocations made by the calling thread so far; panics as [`allocations`].
pub fn thread_allocations() -> u64 {
    assert!(
        nao_kit::alloc::installed(),
        "install testkit::CountingAlloc as the #[global_allocator]"
    );
    nao_kit::alloc::thread_allocations()
}

/// A child process of a test, killed (SIGCONT, then SIGKILL) and reaped on
/// drop, also when the test fails. It derefs to its [`Child`].
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `cmd` with stdin from /dev/null; panics naming `name` when it
    /// cannot start.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc { child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig`; panics when it cannot be sent.
    pub fn signal(&self, sig: Signal) {
        signal::kill(Pid::from_raw(self.pid() as i32), sig)
            .unwrap_or_else(|e| panic!("cannot send {sig} to pid {}: {e}", self.pid()));
    }

    /// Waits up to `timeout` for it to exit; its status, `None` on time-out.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// True while it has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl From<Child> for Proc {
    fn from(child: Child) -> Proc {
        Proc { child }
    }
}

impl std::ops::Deref for Proc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Not once it was reaped: its pid may be another process's by now.
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            // SIGCONT first: a stopped process is then killed at once.
            let _ = signal::kill(Pid::from_raw(self.pid() as i32), Signal::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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
