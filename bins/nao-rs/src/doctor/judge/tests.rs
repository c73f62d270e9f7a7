//! The doctor's rules, table-tested: a healthy robot passes every check;
//! each broken fact fails (or warns) exactly its check, and names the fix.

use super::super::facts::*;
use super::*;
use nao_kit::elf::Linking;

const HAL_GID: u32 = 990;

fn unit(name: &str, sub: &str, rtprio: &str, prio: &str) -> Unit {
    Unit {
        name: name.into(),
        load: "loaded".into(),
        active: "active".into(),
        sub: sub.into(),
        file_state: "enabled".into(),
        limit_rtprio: rtprio.into(),
        limit_memlock: "infinity".into(),
        cpu_priority: prio.into(),
        listen: if name.ends_with(".socket") {
            "[::]:7701 (Datagram)".into()
        } else {
            String::new()
        },
        id: name.into(),
    }
}

fn absent(name: &str) -> Unit {
    Unit {
        name: name.into(),
        load: "not-found".into(),
        active: "inactive".into(),
        sub: "dead".into(),
        ..Unit::default()
    }
}

fn static_pie() -> Linking {
    Linking {
        class64: true,
        machine: 62,
        interpreter: None,
        needed: vec![],
        dynamic_section: true,
    }
}

/// A robot as deploy leaves it, after a re-arm.
fn healthy() -> Facts {
    Facts {
        boards: Ok(vec![UsbDevice {
            sysfs: "/sys/bus/usb/devices/1-1".into(),
            vendor: "ffff".into(),
            product: "0006".into(),
            bus: 1,
            dev: 3,
        }]),
        holders: Holders {
            by: vec![Proc {
                pid: 700,
                name: "nao-rs".into(),
            }],
            unreadable: 0,
            no_proc: false,
        },
        board_node: Some(Ok(Node {
            uid: 0,
            gid: HAL_GID,
            mode: nix::libc::S_IFCHR | 0o660,
        })),
        units: Ok(vec![
            unit("nao-rs-stop.socket", "listening", "", ""),
            unit("nao-rs-guard.service", "running", "40", "40"),
            unit("nao-rs.service", "running", "30", "30"),
            absent("hal.service"),
            absent("lola.service"),
            absent("naoqi.service"),
        ]),
        user_wants: vec![],
        hal_processes: vec![],
        conf_port: Some("7701".into()),
        udp_ports: Ok(vec![53, 7701]),
        groups: Groups {
            hal_gid: Some(HAL_GID),
            hal_members: vec!["nao".into()],
            nao_gid: Some(1001),
        },
        udev_rule: Ok(include_str!("../../../../../config/udev/99-nao-rs.rules").into()),
        run_dir: Ok(Node {
            uid: 0,
            gid: HAL_GID,
            mode: nix::libc::S_IFDIR | 0o2770,
        }),
        tmpfiles_installed: true,
        limits_files: vec![(
            "/etc/security/limits.d/nao-rs.conf".into(),
            "# nao-rs\n@hal - rtprio 40\n".into(),
        )],
        binaries: BINARIES
            .iter()
            .map(|n| Binary {
                name: n.to_string(),
                path: format!("/usr/local/bin/{n}"),
                linking: Some(Ok(static_pie())),
            })
            .collect(),
        kernel: "4.4.86-rt99-aldebaran".into(),
        pidfd: Pidfd::Absent,
        page: PageFacts::Read(PageRead {
            path: "/run/nao-rs/deathswitch".into(),
            armed: true,
            reason: None,
            damage: None,
            cycles: (Some(1000), Some(1008)),
            driver: Some((700, true)),
            guard: Some((650, true, false)),
        }),
        mark: Ok(Some(format!(
            "verified sha256={} at=1796000000\n",
            "ab".repeat(32)
        ))),
    }
}

fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name} in {checks:#?}"))
}

#[test]
fn doctor_passes_a_healthy_robot() {
    let checks = judge(&healthy());
    for c in &checks {
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.fix.is_none(), "{c:?}");
    }
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chest-board",
            "board-holder",
            "hal-lola-naoqi",
            "unit:nao-rs-stop.socket",
            "unit:nao-rs-guard.service",
            "unit:nao-rs.service",
            "stop-socket",
            "group-hal",
            "udev-board",
            "run-dir",
            "limits",
            "binary:nao-rs",
            "binary:nao-rs-guard",
            "binary:naoctl",
            "binary:nao-rs-beacon",
            "kernel",
            "page",
            "heartbeat",
            "guard",
            "verified",
        ]
    );
    assert!(by_name(&checks, "chest-board")
        .detail
        .contains("ffff:0006 bus 001 device 003 (/dev/bus/usb/001/003"));
    assert!(by_name(&checks, "kernel").detail.contains("pidfd absent"));
    // Tripped at boot is how every boot starts: a pass.
    let mut f = healthy();
    if let PageFacts::Read(r) = &mut f.page {
        r.armed = false;
        r.reason = Some("boot".into());
    }
    assert_eq!(by_name(&judge(&f), "page").status, Status::Pass);
    // The beacon is only installed with --team-key: absent is not checked.
    let mut f = healthy();
    f.binaries[3].linking = None;
    assert!(judge(&f).iter().all(|c| c.name != "binary:nao-rs-beacon"));
}

type Break = fn(&mut Facts);

/// Each row: what breaks, the check, its verdict, and words its fix (or
/// detail) must hold.
#[test]
fn doctor_names_the_fix_of_every_failure() {
    let rows: Vec<(&str, Break, &str, Status, &str)> = vec![
        ("no board", |f| f.boards = Ok(vec![]), "chest-board", Status::Fail, "lsusb -d ffff:0006"),
        ("sysfs unreadable", |f| f.boards = Err("/sys: denied".into()), "chest-board", Status::Fail, "sysfs"),
        ("HAL holds the board", |f| f.holders.by = vec![Proc { pid: 42, name: "hal".into() }], "board-holder", Status::Fail, "hal (pid 42) is not nao-rs"),
        ("nobody holds it", |f| f.holders.by.clear(), "board-holder", Status::Fail, "systemctl start nao-rs.service"),
        ("not root", |f| { f.holders.by.clear(); f.holders.unreadable = 3 }, "board-holder", Status::Warn, "as root"),
        ("a team's program hosting the runtime holds it", |f| f.holders.by = vec![Proc { pid: 700, name: "hulk".into() }], "board-holder", Status::Pass, ""),
        ("a team's program hosts the runtime", |f| { f.holders.by = vec![Proc { pid: 700, name: "hulk".into() }]; set_unit(f, "nao-rs.service", |u| { u.file_state = "disabled".into(); u.active = "inactive".into(); }) }, "unit:nao-rs.service", Status::Warn, "hosts the runtime"),
        ("a process the page does not name holds it", |f| { f.holders.by = vec![Proc { pid: 701, name: "hulk".into() }] }, "board-holder", Status::Fail, "hulk (pid 701) is not nao-rs"),
        ("lola.service an alias of nao-rs", |f| set_unit(f, "lola.service", |u| { *u = unit("lola.service", "running", "30", "30"); u.id = "nao-rs.service".into(); }), "hal-lola-naoqi", Status::Pass, ""),
        ("lola enabled-runtime", |f| set_unit(f, "lola.service", |u| { u.load = "loaded".into(); u.file_state = "enabled-runtime".into(); u.id = "lola.service".into(); }), "hal-lola-naoqi", Status::Fail, "systemctl disable --now lola.service"),
        ("the guard holds it", |f| f.holders.by = vec![Proc { pid: 650, name: "nao-rs-guard".into() }], "board-holder", Status::Pass, ""),
        ("lola enabled (team image)", |f| set_unit(f, "lola.service", |u| { u.load = "loaded".into(); u.file_state = "enabled".into(); }), "hal-lola-naoqi", Status::Fail, "systemctl disable --now lola.service"),
        ("hal running (team image)", |f| set_unit(f, "hal.service", |u| { u.load = "loaded".into(); u.file_state = "disabled".into(); u.active = "active".into(); }), "hal-lola-naoqi", Status::Fail, "systemctl disable --now hal.service"),
        ("hal masked", |f| set_unit(f, "hal.service", |u| { u.load = "masked".into(); u.file_state = "masked".into(); }), "hal-lola-naoqi", Status::Pass, ""),
        ("naoqi wanted (NAO OS)", |f| f.user_wants = vec!["/nao/etc/systemd/user/aldebaran.target.wants/naoqi.service".into()], "hal-lola-naoqi", Status::Fail, "mount -o remount,rw / && rm /nao/etc/systemd/user/aldebaran.target.wants/naoqi.service && mount -o remount,ro /"),
        ("lola runs", |f| f.hal_processes = vec![Proc { pid: 77, name: "lola".into() }], "hal-lola-naoqi", Status::Fail, "reboot"),
        ("runtime unit missing", |f| set_unit(f, "nao-rs.service", |u| *u = absent("nao-rs.service")), "unit:nao-rs.service", Status::Fail, "/etc/systemd/system/nao-rs.service"),
        ("guard disabled", |f| set_unit(f, "nao-rs-guard.service", |u| u.file_state = "disabled".into()), "unit:nao-rs-guard.service", Status::Fail, "systemctl enable --now nao-rs-guard.service"),
        ("runtime failed", |f| set_unit(f, "nao-rs.service", |u| u.active = "failed".into()), "unit:nao-rs.service", Status::Fail, "journalctl -u nao-rs.service"),
        ("no systemctl", |f| f.units = Err("no systemctl at /usr/bin/systemctl".into()), "unit:nao-rs.service", Status::Fail, "systemd"),
        ("no systemctl: HAL units unknown", |f| f.units = Err("no systemctl".into()), "hal-lola-naoqi", Status::Warn, "systemctl is-enabled hal lola naoqi"),
        ("no systemctl: socket unknown", |f| f.units = Err("no systemctl".into()), "stop-socket", Status::Fail, "unit:nao-rs-stop.socket"),
        ("socket inactive", |f| set_unit(f, "nao-rs-stop.socket", |u| u.active = "failed".into()), "stop-socket", Status::Fail, "systemctl status nao-rs-stop.socket"),
        ("port not bound", |f| f.udp_ports = Ok(vec![53]), "stop-socket", Status::Fail, "systemctl restart nao-rs-stop.socket"),
        ("ports unreadable", |f| f.udp_ports = Err("/proc/net/udp: gone".into()), "stop-socket", Status::Warn, "/proc/net/udp"),
        ("port mismatch", |f| f.conf_port = Some("7711".into()), "stop-socket", Status::Fail, "nao-rs-stop.socket.d/port.conf"),
        ("port garbage", |f| f.conf_port = Some("x".into()), "stop-socket", Status::Fail, "NAO_RS_UDP_PORT=7701"),
        ("no group hal", |f| f.groups.hal_gid = None, "group-hal", Status::Fail, "groupadd --system hal"),
        ("nao not in hal", |f| f.groups.hal_members.clear(), "group-hal", Status::Fail, "usermod -aG hal nao"),
        ("nao's primary group hal", |f| { f.groups.hal_members.clear(); f.groups.nao_gid = Some(HAL_GID) }, "group-hal", Status::Pass, ""),
        ("no udev rule", |f| f.udev_rule = Err("/etc/udev/rules.d/99-nao-rs.rules: not found".into()), "udev-board", Status::Fail, "udevadm control --reload"),
        ("udev rule without mode", |f| f.udev_rule = Ok("SUBSYSTEM==\"usb\", ATTR{idVendor}==\"ffff\", ATTR{idProduct}==\"0006\", GROUP=\"hal\"\n".into()), "udev-board", Status::Fail, "config/udev/99-nao-rs.rules"),
        ("node root-only", |f| f.board_node = Some(Ok(Node { uid: 0, gid: 0, mode: nix::libc::S_IFCHR | 0o664 })), "udev-board", Status::Fail, "udevadm trigger --attr-match=idVendor=ffff"),
        ("run dir missing", |f| f.run_dir = Err("/run/nao-rs: not found".into()), "run-dir", Status::Fail, "systemd-tmpfiles --create /etc/tmpfiles.d/nao-rs.conf"),
        ("run dir without setgid", |f| f.run_dir = Ok(Node { uid: 0, gid: HAL_GID, mode: nix::libc::S_IFDIR | 0o770 }), "run-dir", Status::Fail, "systemd-tmpfiles --create"),
        ("run dir, no tmpfiles", |f| { f.run_dir = Err("gone".into()); f.tmpfiles_installed = false }, "run-dir", Status::Fail, "config/tmpfiles.d/nao-rs.conf"),
        ("guard's rtprio too low", |f| set_unit(f, "nao-rs-guard.service", |u| u.limit_rtprio = "0".into()), "limits", Status::Fail, "config/systemd/nao-rs-guard.service"),
        ("runtime's memlock", |f| set_unit(f, "nao-rs.service", |u| u.limit_memlock = "65536".into()), "limits", Status::Fail, "LimitMEMLOCK=infinity"),
        ("no limits.d file", |f| f.limits_files.clear(), "limits", Status::Warn, "@hal - rtprio 40"),
        ("limits.d for others", |f| f.limits_files = vec![("/etc/security/limits.d/x.conf".into(), "@audio - rtprio 95\n#@hal - rtprio 9\n".into())], "limits", Status::Warn, "@hal - rtprio 40"),
        ("binary missing", |f| f.binaries[1].linking = None, "binary:nao-rs-guard", Status::Fail, "scripts/robot-build.sh"),
        ("binary dynamic", |f| f.binaries[0].linking = Some(Ok(Linking { class64: true, machine: 62, interpreter: Some("/lib64/ld-linux-x86-64.so.2".into()), needed: vec!["libc.so.6".into()], dynamic_section: true })), "binary:nao-rs", Status::Fail, "target/robot-bin/nao-rs"),
        ("binary garbage", |f| f.binaries[2].linking = Some(Err("/usr/local/bin/naoctl is not an ELF program".into())), "binary:naoctl", Status::Fail, "/usr/local/bin/naoctl"),
        ("old kernel", |f| f.kernel = "3.10.0".into(), "kernel", Status::Fail, "Linux 4.4"),
        ("kernel unnamed", |f| f.kernel = "unknown".into(), "kernel", Status::Warn, "uname -r"),
        ("no page", |f| f.page = PageFacts::Unreadable("the death switch page /run/nao-rs/deathswitch: not found".into()), "page", Status::Fail, "systemctl start nao-rs-guard.service"),
        ("no page: no guard", |f| f.page = PageFacts::Unreadable("gone".into()), "guard", Status::Fail, "see page"),
        ("damaged page", |f| page(f, |r| { r.damage = Some("no magic".into()); r.armed = false; r.reason = Some("page-lost".into()) }), "page", Status::Fail, "naoctl stop"),
        ("tripped by naoctl", |f| page(f, |r| { r.armed = false; r.reason = Some("naoctl".into()) }), "page", Status::Warn, "naoctl rearm"),
        ("no runtime", |f| page(f, |r| r.driver = None), "heartbeat", Status::Fail, "journalctl -u nao-rs.service"),
        ("runtime gone", |f| page(f, |r| r.driver = Some((700, false))), "heartbeat", Status::Fail, "systemctl status nao-rs.service"),
        ("heartbeat stuck", |f| page(f, |r| r.cycles = (Some(5), Some(5))), "heartbeat", Status::Fail, "systemctl restart nao-rs.service"),
        ("no heartbeat yet", |f| page(f, |r| r.cycles = (None, None)), "heartbeat", Status::Fail, "journalctl -u nao-rs.service"),
        ("no guard", |f| page(f, |r| r.guard = None), "guard", Status::Fail, "systemctl start nao-rs-guard.service"),
        ("guard dead", |f| page(f, |r| r.guard = Some((650, false, false))), "guard", Status::Fail, "systemctl restart nao-rs-guard.service"),
        ("guard took over", |f| page(f, |r| r.guard = Some((650, true, true))), "guard", Status::Pass, ""),
        ("never verified", |f| f.mark = Ok(None), "verified", Status::Warn, "cargo nao-rs deploy --verify ROBOT"),
        ("verify skipped", |f| f.mark = Ok(Some("skipped at=1796000000\n".into())), "verified", Status::Warn, "deploy --verify"),
        ("mark garbage", |f| f.mark = Ok(Some("yes\n".into())), "verified", Status::Fail, "cargo nao-rs deploy --verify ROBOT"),
        ("mark unreadable", |f| f.mark = Err("/etc/nao-rs/verified: denied".into()), "verified", Status::Fail, "ls -l /etc/nao-rs/verified"),
    ];
    for (what, brk, name, status, words) in rows {
        let mut f = healthy();
        brk(&mut f);
        let checks = judge(&f);
        let c = by_name(&checks, name);
        assert_eq!(c.status, status, "{what}: {c:#?}");
        if status == Status::Pass {
            assert!(c.fix.is_none(), "{what}: {c:#?}");
        } else {
            let fix = c
                .fix
                .as_deref()
                .unwrap_or_else(|| panic!("{what}: no fix: {c:#?}"));
            assert!(
                fix.contains(words) || c.detail.contains(words),
                "{what}: {words:?} not in {c:#?}"
            );
        }
        // Every other check that is not PASS has a fix too.
        for c in &checks {
            assert_eq!(c.fix.is_some(), c.status != Status::Pass, "{what}: {c:#?}");
        }
    }
}

#[test]
fn doctor_says_what_a_skipped_verification_means() {
    let mut f = healthy();
    f.mark = Ok(Some("skipped at=5\n".into()));
    let c = judge(&f)
        .into_iter()
        .find(|c| c.name == "verified")
        .unwrap();
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.detail.starts_with(
            "nao-rs was enabled without verifying its frames against this robot's HAL \
             (deploy --skip-verify)"
        ),
        "{c:?}"
    );
}

fn set_unit(f: &mut Facts, name: &str, change: impl FnOnce(&mut Unit)) {
    let units = f.units.as_mut().expect("units");
    change(units.iter_mut().find(|u| u.name == name).expect(name));
}

fn page(f: &mut Facts, change: impl FnOnce(&mut PageRead)) {
    match &mut f.page {
        PageFacts::Read(r) => change(r),
        PageFacts::Unreadable(_) => unreachable!(),
    }
}
