//! `nao-rs doctor` as a process, against fake robot trees (`--root`): it
//! writes nothing (the tree is the same, byte for byte and inode for
//! inode, before and after), exits 1 when a check fails and names the
//! failing checks in its JSON; 2 on bad arguments; the same verdicts
//! under the Linux 4.4 floor.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Everything about every entry under `root`: kind, mode, owner, size,
/// times, content (regular files) and target (links).
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mut what = format!(
                "mode {:o} uid {} gid {} len {} mtime {}.{} ctime {}.{} ino {}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
                m.ino()
            );
            if m.file_type().is_symlink() {
                what += &format!(" -> {}", std::fs::read_link(&p).unwrap().display());
            } else if m.is_dir() {
                stack.push(p.clone());
            } else {
                // FNV-1a of the content: any changed byte shows.
                let hash = std::fs::read(&p)
                    .unwrap()
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    });
                what += &format!(" content {hash:016x}");
            }
            out.insert(p.strip_prefix(root).unwrap().display().to_string(), what);
        }
    }
    out
}

fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Runs `nao-rs doctor --json --root ROOT ARGS` in ROOT; its output, and
/// the tree unchanged.
fn doctor(root: &Path, args: &[&str]) -> (Output, Value) {
    doctor_with(root, args, |_| {})
}

/// [`doctor`], with the command changed first (the kernel floor).
fn doctor_with(root: &Path, args: &[&str], change: impl FnOnce(&mut Command)) -> (Output, Value) {
    let before = snapshot(root);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nao-rs"));
    cmd.args(["doctor", "--json", "--root"])
        .arg(root)
        .args(args)
        .current_dir(root)
        .env_remove("NAO_RS_DEATHSWITCH");
    change(&mut cmd);
    let out = cmd.output().unwrap();
    let after = snapshot(root);
    assert_eq!(
        before,
        after,
        "nao-rs doctor changed the tree; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

/// `name -> (status, detail, fix)` of the JSON's checks.
fn checks(v: &Value) -> BTreeMap<String, (String, String, String)> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("name"), (s("status"), s("detail"), s("fix")))
        })
        .collect()
}

fn failing(v: &Value) -> Vec<String> {
    checks(v)
        .into_iter()
        .filter(|(_, (s, _, _))| s == "FAIL")
        .map(|(n, _)| n)
        .collect()
}

/// A board at bus 1 device 5.
fn board(root: &Path) {
    for (a, v) in [
        ("idVendor", "ffff"),
        ("idProduct", "0006"),
        ("busnum", "1"),
        ("devnum", "5"),
    ] {
        write(
            root,
            &format!("sys/bus/usb/devices/1-1/{a}"),
            &format!("{v}\n"),
        );
    }
    // Another device, not the board.
    for (a, v) in [
        ("idVendor", "1d6b"),
        ("idProduct", "0002"),
        ("busnum", "1"),
        ("devnum", "1"),
    ] {
        write(
            root,
            &format!("sys/bus/usb/devices/usb1/{a}"),
            &format!("{v}\n"),
        );
    }
}

#[test]
fn doctor_on_an_empty_robot_writes_nothing_and_names_each_failure() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    board(root);
    write(root, "etc/nao-rs/verified", "skipped at=1796000000\n");
    // The development build is dynamic; naoctl is not a program at all.
    std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_nao-rs"),
        root.join("usr/local/bin/nao-rs"),
    )
    .unwrap();
    write(root, "usr/local/bin/naoctl", "#!/bin/sh\n");

    let (out, v) = doctor(root, &[]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["ok"], false);
    let c = checks(&v);
    assert_eq!(v["fail"].as_u64().unwrap() as usize, failing(&v).len());
    assert_eq!(
        c.len(),
        v["checks"].as_array().unwrap().len(),
        "names are unique"
    );
    let (s, d, _) = &c["chest-board"];
    assert_eq!(s, "PASS");
    assert!(
        d.contains("ffff:0006 bus 001 device 005 (/dev/bus/usb/001/005"),
        "{d}"
    );
    let (s, d, f) = &c["binary:nao-rs"];
    assert!(
        s == "FAIL" && d.contains("dynamically linked") && f.contains("scripts/robot-build.sh"),
        "{d} {f}"
    );
    let (s, d, _) = &c["binary:naoctl"];
    assert!(s == "FAIL" && d.contains("not an ELF program"), "{d}");
    let (s, d, _) = &c["binary:nao-rs-guard"];
    assert!(s == "FAIL" && d.contains("missing"), "{d}");
    assert!(!c.contains_key("binary:nao-rs-beacon"));
    let (s, d, _) = &c["unit:nao-rs.service"];
    assert!(s == "FAIL" && d.contains("no systemctl"), "{d}");
    let (s, d, _) = &c["verified"];
    assert!(
        s == "WARN"
            && d.starts_with(
                "nao-rs was enabled without verifying its frames against this robot's HAL \
                 (deploy --skip-verify)"
            ),
        "{d}"
    );
    assert_eq!(
        failing(&v),
        [
            "binary:nao-rs",
            "binary:nao-rs-guard",
            "binary:naoctl",
            "board-holder",
            "group-hal",
            "guard",
            "heartbeat",
            "page",
            "run-dir",
            "stop-socket",
            "udev-board",
            "unit:nao-rs-guard.service",
            "unit:nao-rs-stop.socket",
            "unit:nao-rs.service",
        ]
    );
    for (name, (s, _, fix)) in &c {
        assert_eq!(fix.is_empty(), s == "PASS", "{name}: {s} {fix:?}");
    }
}

/// A fake `systemctl`: our units enabled and running, `lola.service` a
/// team image's enabled system unit, the rest not found.
const SYSTEMCTL: &str = r#"#!/bin/sh
for u; do :; done
case "$u" in
nao-rs-stop.socket) printf 'LoadState=loaded\nActiveState=active\nSubState=listening\nUnitFileState=enabled\nListen=[::]:7701 (Datagram)\n' ;;
nao-rs-guard.service) printf 'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nLimitRTPRIO=40\nLimitMEMLOCK=infinity\nCPUSchedulingPriority=40\n' ;;
nao-rs.service) printf 'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nLimitRTPRIO=30\nLimitMEMLOCK=infinity\nCPUSchedulingPriority=30\n' ;;
lola.service) printf 'LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=enabled\n' ;;
*) printf 'LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n' ;;
esac
"#;

#[test]
fn doctor_on_an_installed_robot_reads_units_holders_and_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    board(root);
    let gid = nix::unistd::getegid().as_raw();
    write(root, "etc/group", &format!("root:x:0:\nhal:x:{gid}:nao\n"));
    write(root, "etc/passwd", "nao:x:1001:1001::/home/nao:/bin/sh\n");
    write(
        root,
        "etc/udev/rules.d/99-nao-rs.rules",
        include_str!("../../../config/udev/99-nao-rs.rules"),
    );
    write(
        root,
        "etc/tmpfiles.d/nao-rs.conf",
        include_str!("../../../config/tmpfiles.d/nao-rs.conf"),
    );
    write(
        root,
        "etc/nao-rs/nao-rs.conf",
        include_str!("../../../config/nao-rs.conf"),
    );
    write(
        root,
        "etc/security/limits.d/nao-rs.conf",
        "@hal - rtprio 40\n",
    );
    // NAO OS's user units: NAOqi still wanted; lola.service replaced by a
    // unit that starts nao-rs's side (not LoLA), linked relatively.
    let wants = "nao/etc/systemd/user/aldebaran.target.wants";
    write(
        root,
        &format!("{wants}/naoqi.service"),
        "[Service]\nExecStart=/opt/aldebaran/bin/naoqi-bin\n",
    );
    write(
        root,
        "nao/etc/systemd/user/lola.service",
        "[Unit]\nAfter=nao-rs.service\n",
    );
    std::os::unix::fs::symlink("../lola.service", root.join(wants).join("lola.service")).unwrap();
    write(root, "usr/bin/systemctl", SYSTEMCTL);
    std::fs::set_permissions(
        root.join("usr/bin/systemctl"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // The board's node, group hal, 0660; the runtime (pid 700) holds it.
    write(root, "dev/bus/usb/001/005", "");
    std::fs::set_permissions(
        root.join("dev/bus/usb/001/005"),
        std::fs::Permissions::from_mode(0o660),
    )
    .unwrap();
    write(root, "proc/700/comm", "nao-rs\n");
    std::fs::create_dir_all(root.join("proc/700/fd")).unwrap();
    std::os::unix::fs::symlink("/dev/bus/usb/001/005", root.join("proc/700/fd/7")).unwrap();
    write(root, "proc/1/comm", "systemd\n");
    std::fs::create_dir_all(root.join("proc/1/fd")).unwrap();
    std::os::unix::fs::symlink("/dev/null", root.join("proc/1/fd/0")).unwrap();
    write(
        root,
        "proc/net/udp",
        "  sl  local_address rem_address   st\n   1: 00000000:1E15 00000000:0000 07 0\n",
    );
    write(root, "proc/net/udp6", "  sl  local_address\n");
    // The static robot programs where they were built, else Debian's
    // static-pie ldconfig stands in for them.
    let robot_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/robot-bin");
    let mut statics = false;
    for name in ["nao-rs", "nao-rs-guard", "naoctl"] {
        let from = [robot_bin.join(name), "/usr/sbin/ldconfig".into()]
            .into_iter()
            .find(|p| p.is_file());
        if let Some(from) = from {
            std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
            std::fs::copy(from, root.join("usr/local/bin").join(name)).unwrap();
            statics = true;
        }
    }
    write(
        root,
        "etc/nao-rs/verified",
        &format!("verified sha256={} at=1796000000\n", "0f".repeat(32)),
    );
    // /run/nao-rs, setgid, group hal (this test's group); a page made
    // now (tripped boot) with this test process as its guard.
    std::fs::create_dir_all(root.join("run/nao-rs")).unwrap();
    std::fs::set_permissions(
        root.join("run/nao-rs"),
        std::fs::Permissions::from_mode(0o2770),
    )
    .unwrap();
    let page_path = root.join("run/nao-rs/deathswitch");
    let page = deathswitch::Page::open(&page_path).unwrap();
    page.set_guard(std::process::id(), false);

    let (out, v) = doctor(root, &[]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let c = checks(&v);
    for name in [
        "chest-board",
        "board-holder",
        "unit:nao-rs-stop.socket",
        "unit:nao-rs-guard.service",
        "unit:nao-rs.service",
        "stop-socket",
        "group-hal",
        "udev-board",
        "limits",
        "kernel",
        "page",
        "guard",
        "verified",
    ] {
        assert_eq!(c[name].0, "PASS", "{name}: {:?}", c[name]);
    }
    assert!(
        c["board-holder"].1.contains("nao-rs (pid 700)"),
        "{:?}",
        c["board-holder"]
    );
    assert!(
        c["stop-socket"].1.contains("UDP port 7701"),
        "{:?}",
        c["stop-socket"]
    );
    assert!(c["page"].1.contains("tripped (boot)"), "{:?}", c["page"]);
    assert!(
        c["guard"]
            .1
            .contains(&format!("pid {} alive", std::process::id())),
        "{:?}",
        c["guard"]
    );
    let (s, _, fix) = &c["hal-lola-naoqi"];
    assert!(
        s == "FAIL" && fix.contains("systemctl disable --now lola.service"),
        "{fix}"
    );
    assert!(
        fix.contains("rm /nao/etc/systemd/user/aldebaran.target.wants/naoqi.service"),
        "{fix}"
    );
    assert!(!fix.contains("wants/lola.service"), "{fix}");
    let (s, d, _) = &c["heartbeat"];
    assert!(s == "FAIL" && d.contains("no runtime registered"), "{d}");
    // /run/nao-rs must be root's: only a root test can make it so.
    let run_dir = if nix::unistd::geteuid().is_root() {
        "PASS"
    } else {
        "FAIL"
    };
    assert_eq!(c["run-dir"].0, run_dir, "{:?}", c["run-dir"]);
    if statics {
        for name in ["binary:nao-rs", "binary:nao-rs-guard", "binary:naoctl"] {
            assert_eq!(c[name].0, "PASS", "{name}: {:?}", c[name]);
        }
    }
    let mut want = vec!["heartbeat", "hal-lola-naoqi"];
    if run_dir == "FAIL" {
        want.push("run-dir");
    }
    if !statics {
        want.extend(["binary:nao-rs", "binary:nao-rs-guard", "binary:naoctl"]);
    }
    want.sort_unstable();
    assert_eq!(failing(&v), want);

    // Under the Linux 4.4 floor (every newer call ENOSYS): the same
    // verdicts, and the kernel check says pidfd is absent.
    let (floor_out, floor) = doctor_with(root, &[], |c| {
        testkit::under_kernel_floor(c);
    });
    assert_eq!(floor_out.status.code(), Some(1), "{floor:#}");
    let fc = checks(&floor);
    assert!(
        fc["kernel"].1.contains("pidfd absent"),
        "{:?}",
        fc["kernel"]
    );
    let verdicts = |c: &BTreeMap<String, (String, String, String)>| {
        c.iter()
            .map(|(n, (s, _, _))| (n.clone(), s.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(verdicts(&fc), verdicts(&c));

    // --page names another page: a path under the root, read the same way.
    let (out, v) = doctor(root, &["--page", "/run/nao-rs/other"]);
    assert_eq!(out.status.code(), Some(1));
    let (s, d, _) = &checks(&v)["page"];
    assert!(s == "FAIL" && d.contains("/run/nao-rs/other"), "{d}");
    drop(page);
}

#[test]
fn doctor_exits_2_on_bad_arguments() {
    let out = Command::new(env!("CARGO_BIN_EXE_nao-rs"))
        .args(["doctor", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
}
