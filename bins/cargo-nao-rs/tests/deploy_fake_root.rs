//! `cargo nao-rs deploy` end to end, the real command against a fake robot:
//! `--ssh` is a stand-in that runs the remote shell here, every path under
//! a fake root (NAO_RS_DEPLOY_ROOT, which only tests set), with stand-ins
//! for systemctl, udevadm, mount, systemd-tmpfiles, chown and the group
//! tools on PATH that log their calls (systemctl also keeps each unit's
//! enablement). No network, no real ssh. Judged by the fake root's files,
//! byte for byte, and the logged calls.

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SSH: &str = r#"#!/bin/sh
# ssh stand-in: the last argument is the remote command; run it here. The
# robot's `nao-rs capture` is played by the stand-in: it answers with the
# bytes of $FAKE_CAPTURE (a capture of HAL the robot would have made).
for a; do last=$a; done
echo "ssh $*" >>"$FAKE_LOG"
script=$(mktemp)
cat >"$script"
if grep -q ' capture --out ' "$script" && [ -f "$FAKE_CAPTURE" ]; then
  rm -f "$script"
  echo "nao-rs capture (stand-in)" >>"$FAKE_LOG"
  cat "$FAKE_CAPTURE"
  exit 0
fi
sh -c "$last" <"$script"
rc=$?
rm -f "$script"
exit $rc
"#;

/// `id` stand-in: `id -u` says $FAKE_UID (the ssh user), the rest is `id`'s.
const ID: &str = r#"#!/bin/sh
if [ "$#" = 1 ] && [ "$1" = -u ] && [ -n "${FAKE_UID:-}" ]; then echo "$FAKE_UID"; exit 0; fi
exec /usr/bin/id "$@"
"#;

/// `sudo` stand-in: logs, then runs the command (`-n` dropped).
const SUDO: &str = r#"#!/bin/sh
echo "sudo $*" >>"$FAKE_LOG"
[ "$1" = -n ] && shift
exec "$@"
"#;

/// `nao-rs-usbmon verify FILE` stand-in: exits $FAKE_VERIFY_EXIT, saying so.
const USBMON: &str = r#"#!/bin/sh
echo "nao-rs-usbmon $*" >>"$FAKE_LOG"
echo "verify stand-in: $2 compared, exit $FAKE_VERIFY_EXIT"
exit "$FAKE_VERIFY_EXIT"
"#;

const SYSTEMCTL: &str = r#"#!/bin/sh
# systemctl stand-in: logs; keeps enablement in $FAKE_STATE/UNIT.
echo "systemctl $*" >>"$FAKE_LOG"
cmd=$1; shift
[ "$cmd" = --user ] && exit 0
if [ "$cmd" = "${FAKE_FAIL:-}" ]; then echo "Failed to $cmd: the stand-in was told to fail" >&2; exit 1; fi
[ "${1:-}" = --now ] && shift
case $cmd in
  is-enabled)
    if [ -f "$FAKE_STATE/$1" ]; then cat "$FAKE_STATE/$1"; exit 0; fi
    for d in etc/systemd/system usr/lib/systemd/system lib/systemd/system; do
      [ -f "$NAO_RS_DEPLOY_ROOT/$d/$1" ] && { echo disabled; exit 1; }
    done
    exit 1 ;;
  enable) for u; do echo enabled >"$FAKE_STATE/$u"; done ;;
  disable) for u; do echo disabled >"$FAKE_STATE/$u"; done ;;
  mask) for u; do echo masked >"$FAKE_STATE/$u"; done ;;
  unmask) for u; do rm -f "$FAKE_STATE/$u"; done ;;
esac
exit 0
"#;

const LOGGER: &str = r#"#!/bin/sh
echo "$(basename "$0") $*" >>"$FAKE_LOG"
[ "$(basename "$0")" != "${FAKE_FAIL:-}" ]
"#;

const GROUPS: &str = r#"#!/bin/sh
# groupadd / usermod / gpasswd / groupdel stand-in on the fake /etc/group;
# like shadow-utils, each change first copies the file to /etc/group-.
echo "$(basename "$0") $*" >>"$FAKE_LOG"
g="$NAO_RS_DEPLOY_ROOT/etc/group"
cp -p "$g" "$g-"
case $(basename "$0") in
  groupadd) echo "hal:x:990:" >>"$g" ;;
  usermod) sed -i -e '/^hal:/s/:$/:nao/' -e '/^hal:.*[^:]$/{/:nao$/!{/[:,]nao,/!s/$/,nao/}}' "$g" ;;
  gpasswd) sed -i -e '/^hal:/s/:nao$/:/' -e '/^hal:/s/,nao//' "$g" ;;
  groupdel) sed -i '/^hal:/d' "$g" ;;
esac
"#;

/// A static x86_64 program that prints clap's error for an unknown
/// subcommand and exits 2: what an nao-rs without `doctor` answers.
fn fake_program() -> Vec<u8> {
    let msg = b"error: unrecognized subcommand 'doctor'\n";
    let mut code = vec![
        0xb8,
        1,
        0,
        0,
        0, // mov eax, 1 (write)
        0xbf,
        1,
        0,
        0,
        0, // mov edi, 1
        0x48,
        0x8d,
        0x35,
        19,
        0,
        0,
        0, // lea rsi, [rip+19] (msg)
        0xba,
        msg.len() as u8,
        0,
        0,
        0, // mov edx, len
        0x0f,
        0x05, // syscall
        0xb8,
        60,
        0,
        0,
        0, // mov eax, 60 (exit)
        0xbf,
        2,
        0,
        0,
        0, // mov edi, 2
        0x0f,
        0x05, // syscall
    ];
    assert_eq!(code.len(), 36);
    code.extend_from_slice(msg);
    let base = 0x40_0000u64;
    let total = (64 + 56 + code.len()) as u64;
    let mut b = vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[6] = 1;
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86_64
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    b[24..32].copy_from_slice(&(base + 120).to_le_bytes()); // entry
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
    b[52..54].copy_from_slice(&64u16.to_le_bytes());
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&1u16.to_le_bytes());
    let ph = 64;
    b[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    b[ph + 4..ph + 8].copy_from_slice(&5u32.to_le_bytes()); // R X
    b[ph + 16..ph + 24].copy_from_slice(&base.to_le_bytes());
    b[ph + 24..ph + 32].copy_from_slice(&base.to_le_bytes());
    b[ph + 32..ph + 40].copy_from_slice(&total.to_le_bytes());
    b[ph + 40..ph + 48].copy_from_slice(&total.to_le_bytes());
    b[ph + 48..ph + 56].copy_from_slice(&0x1000u64.to_le_bytes());
    b.extend_from_slice(&code);
    b
}

struct Stand {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    robot_bin: PathBuf,
    state: PathBuf,
    log: PathBuf,
    /// What `id -u` says on the robot (the ssh user).
    uid: std::cell::Cell<u32>,
}

fn write(path: &Path, text: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Stand {
    fn new() -> Stand {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let bin = dir.path().join("bin");
        let robot_bin = dir.path().join("robot-bin");
        let state = dir.path().join("systemd-state");
        std::fs::create_dir_all(&state).unwrap();
        write(&bin.join("ssh"), SSH.as_bytes(), 0o755);
        write(&bin.join("systemctl"), SYSTEMCTL.as_bytes(), 0o755);
        write(&bin.join("nao-rs-usbmon"), USBMON.as_bytes(), 0o755);
        write(&bin.join("id"), ID.as_bytes(), 0o755);
        write(&bin.join("sudo"), SUDO.as_bytes(), 0o755);
        write(&dir.path().join("capture.pcap"), b"a capture of HAL", 0o644);
        for t in ["udevadm", "mount", "systemd-tmpfiles", "chown", "su"] {
            write(&bin.join(t), LOGGER.as_bytes(), 0o755);
        }
        for t in ["groupadd", "usermod", "gpasswd", "groupdel"] {
            write(&bin.join(t), GROUPS.as_bytes(), 0o755);
        }
        for p in ["nao-rs", "nao-rs-guard", "naoctl", "nao-rs-beacon"] {
            write(&robot_bin.join(p), &fake_program(), 0o755);
        }
        // What every robot has.
        write(
            &root.join("etc/passwd"),
            b"root:x:0:0::/root:/bin/sh\nnao:x:1001:1001::/home/nao:/bin/sh\n",
            0o644,
        );
        write(&root.join("etc/group"), b"root:x:0:\nnao:x:1001:\n", 0o644);
        for d in [
            "usr/local/bin",
            "etc/systemd/system",
            "etc/udev/rules.d",
            "etc/tmpfiles.d",
            "var/lib",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let log = dir.path().join("calls.log");
        Stand {
            _dir: dir,
            root,
            bin,
            robot_bin,
            state,
            log,
            uid: std::cell::Cell::new(0),
        }
    }

    fn deploy(&self, args: &[&str]) -> Output {
        self.deploy_with(args, 1, "")
    }

    /// Deploy with the verify stand-in exiting `verify_exit`.
    fn deploy_verify_exit(&self, args: &[&str], verify_exit: i32) -> Output {
        self.deploy_with(args, verify_exit, "")
    }

    /// Deploy with `systemctl fail` failing (`""`: none fails).
    fn deploy_with(&self, args: &[&str], verify_exit: i32, fail: &str) -> Output {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let become_ = if args.contains(&"--become") {
            &[][..]
        } else {
            &["--become", "none"][..]
        };
        let out = Command::new(env!("CARGO_BIN_EXE_cargo-nao-rs"))
            .arg("deploy")
            .arg("--ssh")
            .arg(self.bin.join("ssh"))
            .args(become_)
            .arg("--bin-dir")
            .arg(&self.robot_bin)
            .arg("--config-dir")
            .arg(config)
            .args(args)
            .env("PATH", path)
            .env("NAO_RS_DEPLOY_ROOT", &self.root)
            .env("FAKE_STATE", &self.state)
            .env("FAKE_LOG", &self.log)
            .env("FAKE_CAPTURE", self._dir.path().join("capture.pcap"))
            .env("FAKE_VERIFY_EXIT", verify_exit.to_string())
            .env("FAKE_FAIL", fail)
            .env("FAKE_UID", self.uid.get().to_string())
            .env("NAO_RS_USBMON", self.bin.join("nao-rs-usbmon"))
            .current_dir(self._dir.path())
            .output()
            .unwrap();
        eprintln!(
            "deploy {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn state(&self, unit: &str) -> String {
        std::fs::read_to_string(self.state.join(unit))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Every file, directory and link under the fake root: kind, mode, bytes.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for p in entries {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                let m = std::fs::symlink_metadata(&p).unwrap();
                let mode = m.permissions().mode() & 0o7777;
                if m.file_type().is_symlink() {
                    out.insert(
                        rel,
                        format!("link -> {}", std::fs::read_link(&p).unwrap().display()),
                    );
                } else if m.is_dir() {
                    out.insert(rel, format!("dir {mode:o}"));
                    walk(root, &p, out);
                } else {
                    let bytes = std::fs::read(&p).unwrap();
                    out.insert(
                        rel,
                        format!("file {mode:o} {}", String::from_utf8_lossy(&bytes)),
                    );
                }
            }
        }
        walk(&self.root, &self.root, &mut out);
        out
    }

    fn read(&self, p: &str) -> String {
        std::fs::read_to_string(self.root.join(p.trim_start_matches('/'))).unwrap_or_default()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A team image: HAL and LoLA as enabled system units (LoLA's in /etc), the team's program
/// with Requires=lola.service, a 90-hal.rules for vendor ffff.
fn team_image(s: &Stand) {
    // HAL from the image; LoLA's unit the team's own, in /etc (deploy
    // replaces it with a link and puts it back).
    for (dir, u) in [
        ("usr/lib/systemd/system", "hal.service"),
        ("etc/systemd/system", "lola.service"),
    ] {
        write(
            &s.root.join(dir).join(u),
            format!("[Unit]\nDescription={u}\n[Install]\nWantedBy=multi-user.target\n").as_bytes(),
            0o644,
        );
        std::fs::write(s.state.join(u), "enabled\n").unwrap();
    }
    write(
        &s.root.join("etc/systemd/system/team.service"),
        b"[Unit]\nRequires=lola.service\nAfter=lola.service\n",
        0o644,
    );
    write(
        &s.root.join("etc/udev/rules.d/90-hal.rules"),
        b"SUBSYSTEM==\"usb\", ATTRS{idVendor}==\"ffff\", MODE=\"0666\"\n",
        0o644,
    );
    write(
        &s.root.join("etc/group"),
        b"root:x:0:\nnao:x:1001:\nhal:x:990:\n",
        0o644,
    );
}

/// Aldebaran's NAO OS: user units of nao linked from
/// aldebaran.target.wants, `/` read-only.
fn aldebaran(s: &Stand) {
    let user = s.root.join("nao/etc/systemd/user");
    for u in ["hal.service", "lola.service", "naoqi.service"] {
        write(
            &user.join(u),
            format!("[Unit]\nDescription=Aldebaran {u}\n").as_bytes(),
            0o644,
        );
        std::fs::create_dir_all(user.join("aldebaran.target.wants")).unwrap();
        symlink(
            format!("../{u}"),
            user.join("aldebaran.target.wants").join(u),
        )
        .unwrap();
    }
    write(
        &s.root.join("proc/mounts"),
        b"rootfs / rootfs rw 0 0\n/dev/mmcblk0p1 / ext4 ro,noatime 0 0\n",
        0o444,
    );
}

#[test]
fn deploy_team_image_then_again_then_uninstall_restores_byte_for_byte() {
    let s = Stand::new();
    team_image(&s);
    let key = s._dir.path().join("team.key");
    write(&key, &[7u8; 32], 0o600);
    let key = key.to_str().unwrap();
    let before = s.snapshot();

    let o = s.deploy(&["--dry-run", "--skip-verify", "--team-key", key, "robot1"]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(
        out.contains("would create /usr/local/bin/nao-rs ("),
        "{out}"
    );
    assert!(out.contains("would disable and stop hal.service"), "{out}");
    assert!(out.contains("robot1: dry run:"), "{out}");
    assert_eq!(s.snapshot(), before, "a dry run changes nothing");

    let o = s.deploy(&["--skip-verify", "--team-key", key, "robot1"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("system: a team image"), "{out}");
    assert!(
        out.contains("/etc/systemd/system/team.service says Requires=lola.service"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(s.root.join("usr/local/bin/nao-rs")).unwrap(),
        fake_program()
    );
    assert!(s
        .read("/etc/nao-rs/nao-rs.conf")
        .contains("\nNAO_RS_CONTROLLER=lola\n"));
    assert!(s.read("/etc/nao-rs/verified").starts_with("skipped at="));
    assert!(s
        .read("/etc/systemd/system/nao-rs-lola.service")
        .contains("/tmp/robocup"));
    assert_eq!(
        std::fs::read_link(s.root.join("etc/systemd/system/lola.service")).unwrap(),
        Path::new("nao-rs-lola.service")
    );
    assert_eq!(
        s.read("/etc/group"),
        "root:x:0:\nnao:x:1001:\nhal:x:990:nao\n"
    );
    let key_mode = std::fs::metadata(s.root.join("etc/nao-rs/team.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    assert!(s
        .read("/var/lib/nao-rs/deploy/manifest")
        .contains("disabled hal.service\n"));
    let calls = s.calls();
    for want in [
        "systemctl disable --now hal.service",
        "systemctl disable --now lola.service",
        "systemctl enable --now nao-rs-stop.socket nao-rs-guard.service nao-rs.service nao-rs-beacon.service",
        "udevadm trigger --attr-match=idVendor=ffff",
        "chown nao",
    ] {
        assert!(calls.contains(want), "{want} in {calls}");
    }
    assert_eq!(s.state("hal.service"), "disabled");
    assert!(out.contains("this nao-rs has no `doctor` yet"), "{out}");
    assert!(out.contains("robot1: deployed:"), "{out}");
    let installed = s.snapshot();

    let o = s.deploy(&["--team-key", key, "robot1"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("robot1: nothing to change"), "{out}");
    assert_eq!(s.snapshot(), installed, "a second deploy changes nothing");

    let o = s.deploy(&["--uninstall", "robot1"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("restore /etc/systemd/system/lola.service from its backup")
            && out.contains("enable and start hal.service again"),
        "{out}"
    );
    assert!(
        out.contains("robot1: uninstalled: ")
            && out.contains(
                "restored /etc/systemd/system/lola.service, hal.service enabled, lola.service enabled"
            ),
        "{out}"
    );
    assert_eq!(s.snapshot(), before, "uninstall restores what was there");
    assert_eq!(s.state("hal.service"), "enabled");
    assert_eq!(s.state("lola.service"), "enabled");
    assert_eq!(s.state("nao-rs.service"), "disabled");

    let o = s.deploy(&["--uninstall", "robot1"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("no manifest"), "{}", stdout(&o));
}

#[test]
fn deploy_aldebaran_remounts_and_uninstall_restores_byte_for_byte() {
    let s = Stand::new();
    aldebaran(&s);
    let before = s.snapshot();

    let o = s.deploy(&["--skip-verify", "nao"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("system: Aldebaran NAO OS"), "{out}");
    let w = "nao/etc/systemd/user/aldebaran.target.wants";
    assert!(!s.root.join(w).join("hal.service").exists());
    assert!(!s.root.join(w).join("naoqi.service").exists());
    assert!(std::fs::symlink_metadata(s.root.join(w).join("lola.service")).is_ok());
    assert!(s
        .read("/nao/etc/systemd/user/lola.service")
        .contains("/tmp/robocup"));
    assert_eq!(
        s.read("/var/lib/nao-rs/deploy/backup/nao/etc/systemd/user/lola.service"),
        "[Unit]\nDescription=Aldebaran lola.service\n"
    );
    let calls = s.calls();
    assert!(calls.contains("mount -o remount,rw /"), "{calls}");
    assert!(calls.contains("mount -o remount,ro /"), "{calls}");
    assert!(calls.contains("groupadd --system hal"), "{calls}");
    let installed = s.snapshot();

    let o = s.deploy(&["nao"]);
    assert!(
        stdout(&o).contains("nao: nothing to change"),
        "{}",
        stdout(&o)
    );
    assert_eq!(s.snapshot(), installed);

    let o = s.deploy(&["--uninstall", "nao"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("re-enable a user unit"), "{out}");
    assert_eq!(s.snapshot(), before, "uninstall restores what was there");
}

#[test]
fn deploy_several_robots_one_line_each_and_failures_named() {
    let s = Stand::new();
    let o = s.deploy(&["--dry-run", "--skip-verify", "a", "b"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("\na: dry run:") && out.contains("\nb: dry run:"),
        "{out}"
    );

    // Never verified and neither flag: refused, nothing changed.
    let before = s.snapshot();
    let o = s.deploy(&["c"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("c: FAILED: nao-rs's frames were never verified"),
        "{out}"
    );
    assert_eq!(s.snapshot(), before);

    // --become auto: as root directly; as another user through sudo -n.
    let o = s.deploy(&["--dry-run", "--skip-verify", "--become", "auto", "r"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let sudo_runs = |s: &Stand| s.calls().lines().filter(|l| *l == "sudo -n sh -s").count();
    assert_eq!(sudo_runs(&s), 0, "{}", s.calls());
    s.uid.set(1000);
    let o = s.deploy(&["--dry-run", "--skip-verify", "--become", "auto", "r"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(sudo_runs(&s), 1, "the probe through sudo: {}", s.calls());
    s.uid.set(0);

    // A robot named twice would race with itself.
    let o = s.deploy(&["--dry-run", "--skip-verify", "a", "a"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"a\" is named twice"));

    // A dynamically linked binary is refused on the laptop, naming the fix.
    let mut dynamic = fake_program();
    dynamic[64..68].copy_from_slice(&3u32.to_le_bytes()); // PT_INTERP
    write(&s.robot_bin.join("naoctl"), &dynamic, 0o755);
    let o = s.deploy(&["--skip-verify", "d"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("naoctl is 64-bit x86_64, dynamically linked")
            && err.contains("bash scripts/robot-build.sh"),
        "{err}"
    );
}

#[test]
fn deploy_refuses_to_enable_after_a_failed_verify() {
    let s = Stand::new();
    team_image(&s);
    let before = s.snapshot();
    // The capture does not replay byte for byte: nothing changes, HAL runs on.
    let o = s.deploy_verify_exit(&["--verify", "nao7"], 1);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("verify stand-in:") && out.contains("nao7-capture.pcap"),
        "{out}"
    );
    assert!(
        out.contains("nao7: FAILED: the capture") && out.contains("does not replay byte for byte"),
        "{out}"
    );
    assert!(out.contains("nao-rs is not enabled on nao7"), "{out}");
    assert_eq!(s.snapshot(), before, "a failed verify changes nothing");
    assert!(!s.calls().contains("systemctl enable"), "{}", s.calls());
    assert_eq!(s.state("hal.service"), "enabled");

    // It replays: the mark names the capture's sha256.
    let o = s.deploy_verify_exit(&["--verify", "nao7"], 0);
    assert!(o.status.success(), "{}", stdout(&o));
    // sha256 of "a capture of HAL" (sha256sum).
    let out = Command::new("sha256sum")
        .arg(s._dir.path().join("capture.pcap"))
        .output()
        .unwrap();
    let want = String::from_utf8_lossy(&out.stdout[..64]).into_owned();
    let mark = s.read("/etc/nao-rs/verified");
    assert!(
        mark.starts_with(&format!("verified sha256={want} at=")),
        "{mark}"
    );
    assert!(
        s.calls()
            .contains("systemctl enable --now nao-rs-stop.socket"),
        "{}",
        s.calls()
    );

    // Again with --verify: HAL is off now, the mark covers this build: no
    // new capture, nothing to change.
    let installed = s.snapshot();
    let captures = s.calls().matches("nao-rs capture (stand-in)").count();
    let o = s.deploy_verify_exit(&["--verify", "nao7"], 1);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("the mark is kept, no new capture") && out.contains("nao7: nothing to change"),
        "{out}"
    );
    assert_eq!(
        s.calls().matches("nao-rs capture (stand-in)").count(),
        captures
    );
    assert_eq!(s.snapshot(), installed);

    // A capture the robot cannot make (this nao-rs has no `capture`): the
    // real script runs and fails; nothing changes.
    let s = Stand::new();
    let before = s.snapshot();
    std::fs::remove_file(s._dir.path().join("capture.pcap")).unwrap();
    let o = s.deploy(&["--verify", "e"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("e: FAILED: nao-rs capture on e failed"),
        "{}",
        stdout(&o)
    );
    assert_eq!(s.snapshot(), before);
}

#[test]
fn deploy_cut_short_is_undone_by_uninstall() {
    let s = Stand::new();
    team_image(&s);
    let before = s.snapshot();
    // The last step (enabling nao-rs) fails: the robot's line names it, the
    // manifest holds every step before it.
    let o = s.deploy_with(&["--skip-verify", "nao9"], 1, "enable");
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("nao9: FAILED: the apply script on nao9 failed")
            && out.contains("FAILED: enable and start nao-rs-stop.socket")
            && out.contains("--uninstall` undoes it"),
        "{out}"
    );
    let manifest = s.read("/var/lib/nao-rs/deploy/manifest");
    assert!(
        manifest.contains("disabled hal.service\n") && !manifest.contains("enabled nao-rs"),
        "{manifest}"
    );
    assert_eq!(s.state("hal.service"), "disabled");
    let o = s.deploy(&["--uninstall", "nao9"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(s.snapshot(), before, "uninstall restores what was there");
    assert_eq!(s.state("hal.service"), "enabled");
    assert_eq!(s.state("lola.service"), "enabled");

    // A write that fails half-way (chown of the team key) leaves no
    // half-written file behind.
    let key = s._dir.path().join("team.key");
    write(&key, &[7u8; 32], 0o600);
    let o = s.deploy_with(
        &["--skip-verify", "--team-key", key.to_str().unwrap(), "nao9"],
        1,
        "chown",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("FAILED: create /etc/nao-rs/team.key"),
        "{}",
        stdout(&o)
    );
    let cut = s.snapshot();
    assert!(
        cut.contains_key("etc/nao-rs/nao-rs.conf"),
        "the steps before it are done"
    );
    assert!(
        !cut.keys()
            .any(|k| k.ends_with(".nao-rs-new") || k.ends_with("team.key")),
        "{:#?}",
        cut.keys()
            .filter(|k| k.starts_with("etc/nao-rs"))
            .collect::<Vec<_>>()
    );
    let o = s.deploy(&["--uninstall", "nao9"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(s.snapshot(), before);
}
