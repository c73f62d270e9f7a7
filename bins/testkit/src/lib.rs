//! Test support shared by the integration tests of every nao-rs program.
//!
//! [`bin`] finds (and if needed builds) a binary of this workspace, so a test
//! in one package can start the programs of the others: the virtual robot,
//! the guard, the runtime, naoctl.

use std::path::{Path, PathBuf};
use std::process::Command;

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
/// built with `cargo build --bin NAME` in the test's own profile first, so
/// the test never runs a stale binary. Panics with the build's message if
/// it does not build (tests only).
pub fn bin(name: &str) -> PathBuf {
    let dir = profile_dir();
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
    let path = dir.join(name);
    assert!(path.exists(), "{} missing after build", path.display());
    path
}
