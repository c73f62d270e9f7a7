//! `nao-rs capture --out FILE [--seconds N] [--no-restart] [--hal-unit UNIT]`:
//! on the robot, as root, while HAL still drives the chest board, a usbmon
//! capture of the chest board only (pcap, link type 220
//! `LINUX_USB_MMAPPED`, what `nao-rs-usbmon verify` reads), with a restart
//! of HAL part way so that a start-up is in it (`docs/usbmon.md`).
//!
//! What it does, in order: finds the chest board in sysfs (`ffff:0006`:
//! bus and device number); makes sure usbmon is there (`modprobe usbmon`
//! when `/dev/usbmonN` is missing: the one change it makes to the system);
//! finds the HAL unit (the system unit `hal.service`, else the user unit
//! of `nao`; `--hal-unit` names it); reads usbmon's binary events of the
//! board's bus with `MON_IOCX_GETX` (Linux 2.6.36 on) after `poll` with a
//! timeout, so every wait has a deadline; keeps the chest board's events
//! ([`ChestFilter`]: its device number, and a new one its enumeration
//! names); restarts HAL at 30 % of the time; stops after N seconds; prints
//! the file's path and its sha256.
//!
//! The pure parts (the usbmon header, the filter, the pcap records, the
//! sysfs match, the HAL unit's commands) are unit tested without root.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Options of `nao-rs capture`.
#[derive(clap::Args)]
pub struct CaptureArgs {
    /// The pcap file to write (link type 220, the chest board only).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// How long to capture, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=600))]
    pub seconds: u32,
    /// Restart HAL part way so that its start-up is in the capture (the
    /// default).
    #[arg(long, conflicts_with = "no_restart")]
    pub restart_hal: bool,
    /// Do not restart HAL (the capture then holds no start-up, and
    /// `nao-rs-usbmon verify` cannot compare it).
    #[arg(long)]
    pub no_restart: bool,
    /// The HAL unit to restart: a system unit (`hal.service`) or a user's
    /// unit as USER:UNIT (`nao:hal.service`). Default: found.
    #[arg(long, value_name = "UNIT", value_parser = parse_hal_unit)]
    pub hal_unit: Option<HalUnit>,
}

// ---------------------------------------------------------------- pure part

/// The chest board's vendor and product.
pub const CHEST_IDS: (u16, u16) = (nao_wire::link::VENDOR_ID, nao_wire::link::PRODUCT_ID);

/// The bytes of usbmon's binary event header as `MON_IOCX_GETX` returns
/// it (`struct usbmon_packet`, Documentation/usb/usbmon.rst), and of link
/// type 220's per-packet header.
pub const MON_HEADER_LEN: usize = 64;

/// The fields of a usbmon event header that the capture reads (host byte
/// order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonHeader {
    /// URB id: a submission and its completion share it.
    pub id: u64,
    /// `S`ubmission, `C`ompletion or `E`rror.
    pub kind: u8,
    /// 0 isochronous, 1 interrupt, 2 control, 3 bulk.
    pub xfer: u8,
    /// Endpoint and direction (bit 7: IN).
    pub ep: u8,
    /// Device number.
    pub dev: u8,
    /// Bus number.
    pub bus: u16,
    /// The setup packet (control submissions only: flag_setup 0).
    pub setup: Option<[u8; 8]>,
    /// Seconds of the event's time.
    pub ts_sec: i64,
    /// Microseconds of the event's time.
    pub ts_usec: i32,
    /// The URB's status (a completion's error, negative errno).
    pub status: i32,
    /// The transfer's length (submitted or actual).
    pub length: u32,
    /// The data bytes delivered after the header.
    pub len_cap: u32,
}

impl MonHeader {
    /// Reads a header in host byte order; `None` when shorter than 64 bytes.
    pub fn parse(b: &[u8]) -> Option<MonHeader> {
        let b: &[u8; MON_HEADER_LEN] = b.get(..MON_HEADER_LEN)?.try_into().ok()?;
        let u16_at = |at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            u64::from_ne_bytes(x)
        };
        let mut setup = [0u8; 8];
        setup.copy_from_slice(&b[40..48]);
        Some(MonHeader {
            id: u64_at(0),
            kind: b[8],
            xfer: b[9],
            ep: b[10],
            dev: b[11],
            bus: u16_at(12),
            setup: (b[14] == 0).then_some(setup),
            ts_sec: u64_at(16) as i64,
            ts_usec: u32_at(24) as i32,
            status: u32_at(28) as i32,
            length: u32_at(32),
            len_cap: u32_at(36),
        })
    }
}

/// pcap's file header for link type 220, in host byte order (the order of
/// the usbmon headers in the records, which is how readers tell it).
pub fn pcap_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_ne_bytes());
    h[4..6].copy_from_slice(&2u16.to_ne_bytes());
    h[6..8].copy_from_slice(&4u16.to_ne_bytes());
    // Time zone and accuracy: 0.
    h[16..20].copy_from_slice(&(MAX_DATA as u32 + MON_HEADER_LEN as u32).to_ne_bytes());
    h[20..24].copy_from_slice(&220u32.to_ne_bytes());
    h
}

/// One pcap record: its 16-byte header (the event's time, the captured and
/// the original length) and the event (usbmon header and data).
pub fn pcap_record(h: &MonHeader, event: &[u8], out: &mut Vec<u8>) {
    let incl = event.len() as u32;
    let orig = incl.max((MON_HEADER_LEN as u32).saturating_add(h.length));
    out.extend_from_slice(&(h.ts_sec as u32).to_ne_bytes());
    out.extend_from_slice(&(h.ts_usec as u32).to_ne_bytes());
    out.extend_from_slice(&incl.to_ne_bytes());
    out.extend_from_slice(&orig.to_ne_bytes());
    out.extend_from_slice(event);
}

/// The most data bytes kept of one event (a frame is at most 512).
pub const MAX_DATA: usize = 64 * 1024;

/// At most this many events of undecided devices are held (the enumeration
/// of a device takes a few).
const HELD_MAX: usize = 256;

/// Keeps the chest board's events of its bus: the device number sysfs gave
/// at the start, a device number that sends the protocol's vendor requests
/// (bmRequestType 40/c0, bRequest 01..05), and one whose answer to the
/// kernel's GET_DESCRIPTOR (device) says `ffff:0006` (the board
/// re-enumerated: USB reset, replug). Events of a device not yet decided
/// are held (at most [`HELD_MAX`], oldest dropped) and written when it is
/// found to be the board, in their order; device 0 (before SET_ADDRESS)
/// and other buses are dropped.
#[derive(Debug)]
pub struct ChestFilter {
    bus: u16,
    chest: Vec<u8>,
    other: Vec<u8>,
    /// GET_DESCRIPTOR (device) submissions waiting: (device, URB id).
    asked: Vec<(u8, u64)>,
    held: Vec<(u8, Vec<u8>)>,
}

impl ChestFilter {
    /// A filter for the board at `bus`/`dev`.
    pub fn new(bus: u16, dev: u8) -> ChestFilter {
        ChestFilter {
            bus,
            chest: vec![dev],
            other: Vec::new(),
            asked: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The device numbers the board had, in the order seen.
    pub fn devices(&self) -> &[u8] {
        &self.chest
    }

    /// Offers one event (`h` parsed from `event`); pushes what is to be
    /// written, in order, to `out`.
    pub fn offer(&mut self, h: &MonHeader, event: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if h.bus != self.bus || h.dev == 0 {
            return;
        }
        let dev = h.dev;
        let descriptor = (h.xfer == 2 && h.kind != b'S')
            .then(|| self.asked.iter().position(|&a| a == (dev, h.id)))
            .flatten();
        if let Some(i) = descriptor {
            self.asked.swap_remove(i);
            let data = event.get(MON_HEADER_LEN..).unwrap_or(&[]);
            let ids = (data.len() >= 12).then(|| {
                (
                    u16::from_le_bytes([data[8], data[9]]),
                    u16::from_le_bytes([data[10], data[11]]),
                )
            });
            if h.status == 0 && ids == Some(CHEST_IDS) {
                self.other.retain(|&d| d != dev);
                self.decide_chest(dev, event, out);
            } else if ids.is_some() {
                // Another device: its number is not the board's (any more).
                self.chest.retain(|&d| d != dev);
                if !self.other.contains(&dev) {
                    self.other.push(dev);
                }
                self.held.retain(|(d, _)| *d != dev);
            }
            return;
        }
        if h.xfer == 2 && h.kind == b'S' {
            if let Some(s) = h.setup {
                if s[0] == 0x80 && s[1] == 0x06 && s[3] == 0x01 {
                    self.asked.retain(|&(d, _)| d != dev);
                    self.asked.push((dev, h.id));
                }
                if !self.chest.contains(&dev)
                    && matches!(s[0], 0x40 | 0xc0)
                    && (1..=5).contains(&s[1])
                {
                    self.other.retain(|&d| d != dev);
                    self.decide_chest(dev, event, out);
                    return;
                }
            }
        }
        if self.chest.contains(&dev) {
            out.push(event);
        } else if !self.other.contains(&dev) {
            if self.held.len() >= HELD_MAX {
                self.held.remove(0);
            }
            self.held.push((dev, event));
        }
    }

    fn decide_chest(&mut self, dev: u8, event: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if !self.chest.contains(&dev) {
            self.chest.push(dev);
        }
        let held = std::mem::take(&mut self.held);
        for (d, e) in held {
            if d == dev {
                out.push(e);
            } else {
                self.held.push((d, e));
            }
        }
        out.push(event);
    }
}

/// The HAL unit to restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HalUnit {
    /// A system unit (team images: `hal.service`).
    System(String),
    /// A user's unit (Aldebaran's NAO OS: `nao`'s `hal.service`).
    User {
        /// The user.
        user: String,
        /// The unit.
        unit: String,
    },
}

/// `UNIT` (a system unit) or `USER:UNIT`.
pub fn parse_hal_unit(v: &str) -> Result<HalUnit, String> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@\\".contains(&b))
    };
    match v.split_once(':') {
        Some((user, unit)) if ok(user) && ok(unit) => Ok(HalUnit::User {
            user: user.into(),
            unit: unit.into(),
        }),
        None if ok(v) => Ok(HalUnit::System(v.into())),
        _ => Err(format!(
            "{v:?} is not UNIT or USER:UNIT (letters, digits, - _ . @ \\), e.g. hal.service or nao:hal.service"
        )),
    }
}

/// The ways to reach a user's systemd: `systemctl --user -M USER@` (systemd
/// 248 on), else `su USER` with the user's runtime directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserBus {
    /// `systemctl --user -M USER@ ...`.
    Machine,
    /// `su USER -c 'XDG_RUNTIME_DIR=/run/user/UID systemctl --user ...'`.
    Su {
        /// The user's uid.
        uid: u32,
    },
}

/// The command that runs `systemctl VERB UNIT` for `unit` (`extra`: more
/// arguments before the unit, e.g. `--quiet`).
pub fn systemctl(unit: &HalUnit, bus: UserBus, verb: &str, extra: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["systemctl".into()];
    match (unit, bus) {
        (HalUnit::System(u), _) => {
            argv.push(verb.into());
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv.push(u.clone());
        }
        (HalUnit::User { user, unit }, UserBus::Machine) => {
            argv.extend([
                "--user".into(),
                "-M".into(),
                format!("{user}@"),
                verb.into(),
            ]);
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv.push(unit.clone());
        }
        (HalUnit::User { user, unit }, UserBus::Su { uid }) => {
            let mut inner = format!("XDG_RUNTIME_DIR=/run/user/{uid} systemctl --user {verb}");
            for e in extra {
                inner.push(' ');
                inner.push_str(e);
            }
            inner.push(' ');
            inner.push_str(unit);
            argv = vec!["su".into(), user.clone(), "-c".into(), inner];
        }
    }
    argv
}

/// A user's uid from `/etc/passwd`'s text (read, not looked up through
/// NSS: the robot build is static).
pub fn uid_in_passwd(passwd: &str, user: &str) -> Option<u32> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == user).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// `_IOC` of the generic Linux ioctl layout (x86, ARM): direction 2 bits,
/// size 14 bits, type 8 bits, number 8 bits.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// usbmon's ioctl type.
const MON_IOC_MAGIC: u32 = 0x92;

/// `struct mon_get_arg` of `MON_IOCX_GETX`: the header's and the data's
/// buffers.
#[repr(C)]
struct MonGetArg {
    hdr: *mut u8,
    data: *mut u8,
    alloc: usize,
}

/// `MON_IOCX_GETX`: the next event with the 64-byte header.
pub const MON_IOCX_GETX: u32 = ioc(1, MON_IOC_MAGIC, 10, std::mem::size_of::<MonGetArg>());
/// `MON_IOCG_STATS`: events queued and dropped (two u32).
pub const MON_IOCG_STATS: u32 = ioc(2, MON_IOC_MAGIC, 3, 8);
/// `MON_IOCT_RING_SIZE`: the reader's ring buffer size.
pub const MON_IOCT_RING_SIZE: u32 = ioc(0, MON_IOC_MAGIC, 4, 0);

// ---------------------------------------------------------------- the robot

/// Every wait of a command this runs (detection, modprobe) ends by then.
const COMMAND_DEADLINE: Duration = Duration::from_secs(10);
/// After the capture, the restart gets this long more to end.
const RESTART_GRACE: Duration = Duration::from_secs(10);

/// Runs `argv` and waits for it until `deadline` (then kills it: it is
/// ours); its exit code.
fn run(argv: &[String], deadline: Duration) -> Result<i32, String> {
    let mut child = spawn(argv)?;
    let end = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Ok(s.code().unwrap_or(-1)),
            Ok(None) if Instant::now() >= end => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{}` did not end within {} s (killed)",
                    argv.join(" "),
                    deadline.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("`{}`: {e}", argv.join(" "))),
        }
    }
}

fn spawn(argv: &[String]) -> Result<Child, String> {
    let (program, args) = argv.split_first().ok_or("no command")?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("`{}`: cannot start: {e}", argv.join(" ")))
}

/// The chest board as sysfs shows it: (bus, device number).
fn find_chest_board(sysfs: &Path) -> Result<(u16, u8), String> {
    let no = |why: String| {
        format!(
            "no chest board ({}) in {}{why}: run this on the robot, with the board powered",
            crate::chest_usb::ids(),
            sysfs.display()
        )
    };
    crate::chest_usb::chest_boards(sysfs)
        .map_err(|e| no(format!(" ({e})")))?
        .iter()
        .find_map(|b| {
            Some((b.bus, u8::try_from(b.dev).ok()?)).filter(|&(bus, dev)| bus != 0 && dev != 0)
        })
        .ok_or_else(|| no(String::new()))
}

/// `/dev/usbmonBUS`, loading usbmon when it is missing.
fn usbmon_device(bus: u16) -> Result<(PathBuf, bool), String> {
    let dev = PathBuf::from(format!("/dev/usbmon{bus}"));
    if dev.exists() {
        return Ok((dev, false));
    }
    let code = run(&["modprobe".into(), "usbmon".into()], COMMAND_DEADLINE)?;
    if code != 0 {
        return Err(format!(
            "{} is missing and `modprobe usbmon` failed (exit {code}): this kernel has no usbmon module; \
             build it (CONFIG_USB_MON) or capture elsewhere",
            dev.display()
        ));
    }
    let end = Instant::now() + Duration::from_secs(2);
    while !dev.exists() {
        if Instant::now() >= end {
            return Err(format!(
                "`modprobe usbmon` succeeded but {} did not appear within 2 s (is /dev managed by devtmpfs?)",
                dev.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((dev, true))
}

/// The running HAL unit and how to reach it.
fn detect_hal(named: Option<HalUnit>) -> Result<(HalUnit, UserBus), String> {
    let uid_of = |user: &str| {
        std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|p| uid_in_passwd(&p, user))
    };
    let active = |unit: &HalUnit, bus: UserBus| {
        run(
            &systemctl(unit, bus, "is-active", &["--quiet"]),
            COMMAND_DEADLINE,
        ) == Ok(0)
    };
    // How to reach the unit where it is active: a system unit directly, a
    // user's through `-M USER@`, else through `su USER`.
    let reach = |unit: &HalUnit| -> Option<UserBus> {
        if active(unit, UserBus::Machine) {
            return Some(UserBus::Machine);
        }
        let HalUnit::User { user, .. } = unit else {
            return None;
        };
        let bus = UserBus::Su { uid: uid_of(user)? };
        active(unit, bus).then_some(bus)
    };
    let candidates = match named {
        Some(u) => vec![u],
        None => vec![
            HalUnit::System("hal.service".into()),
            HalUnit::User {
                user: "nao".into(),
                unit: "hal.service".into(),
            },
        ],
    };
    for unit in &candidates {
        if let Some(bus) = reach(unit) {
            return Ok((unit.clone(), bus));
        }
    }
    let tried: Vec<String> = candidates
        .iter()
        .map(|u| match u {
            HalUnit::System(s) => format!("system unit {s}"),
            HalUnit::User { user, unit } => format!("{user}'s user unit {unit}"),
        })
        .collect();
    Err(format!(
        "no running HAL unit: tried {}; start HAL first (the capture records HAL), name its unit \
         with --hal-unit UNIT or USER:UNIT, or capture without a restart with --no-restart",
        tried.join(", ")
    ))
}

/// The usbmon reader of one bus.
struct Mon {
    file: File,
}

impl Mon {
    fn open(path: &Path) -> Result<Mon, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| format!("{}: cannot open: {e} (run as root)", path.display()))?;
        let m = Mon { file };
        // A larger ring (1 MiB) on our own reader: no change to the system.
        // SAFETY: MON_IOCT_RING_SIZE takes an int by value; the fd is open.
        let _ = unsafe { libc::ioctl(m.fd(), MON_IOCT_RING_SIZE as _, 1usize << 20) };
        Ok(m)
    }

    fn fd(&self) -> libc::c_int {
        self.file.as_raw_fd()
    }

    /// Waits for an event up to `timeout`; whether one is ready.
    fn wait(&self, timeout: Duration) -> Result<bool, String> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(1000) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(format!("poll on usbmon: {e}"));
        }
        Ok(n > 0 && p.revents & libc::POLLIN != 0)
    }

    /// The next event (header and data) into `buf`; its length, or `None`
    /// when none is ready.
    fn get(&self, buf: &mut [u8; MON_HEADER_LEN + MAX_DATA]) -> Result<Option<usize>, String> {
        let (hdr, data) = buf.split_at_mut(MON_HEADER_LEN);
        let mut arg = MonGetArg {
            hdr: hdr.as_mut_ptr(),
            data: data.as_mut_ptr(),
            alloc: data.len(),
        };
        // SAFETY: MON_IOCX_GETX writes at most 64 bytes to `hdr` and `alloc`
        // bytes to `data`, both inside `buf`, which outlives the call.
        let r = unsafe { libc::ioctl(self.fd(), MON_IOCX_GETX as _, &mut arg as *mut MonGetArg) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
                _ => Err(format!("usbmon MON_IOCX_GETX: {e}")),
            };
        }
        let Some(h) = MonHeader::parse(&buf[..MON_HEADER_LEN]) else {
            return Ok(None);
        };
        Ok(Some(MON_HEADER_LEN + (h.len_cap as usize).min(MAX_DATA)))
    }

    /// Events the kernel dropped for this reader (its ring was full).
    fn dropped(&self) -> Option<u32> {
        let mut stats = [0u32; 2];
        // SAFETY: MON_IOCG_STATS writes two u32 into `stats`.
        let r = unsafe { libc::ioctl(self.fd(), MON_IOCG_STATS as _, stats.as_mut_ptr()) };
        (r == 0).then_some(stats[1])
    }
}

/// The hex sha256 of the file at `path`.
fn sha256_of(path: &Path) -> Result<String, String> {
    let mut f =
        File::open(path).map_err(|e| format!("{}: cannot read back: {e}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("{}: cannot read back: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(nao_kit::hex::hex(&h.finalize()))
}

/// Runs `nao-rs capture`.
pub fn main(args: CaptureArgs) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "needs root (usbmon reads every USB transfer, and HAL's unit is restarted): \
             sudo nao-rs capture ..."
                .into(),
        );
    }
    let (bus, dev) = find_chest_board(Path::new("/sys/bus/usb/devices"))?;
    let restart = !args.no_restart;
    let hal = if restart {
        Some(detect_hal(args.hal_unit.clone())?)
    } else {
        None
    };
    let (mon_path, loaded) = usbmon_device(bus)?;
    if loaded {
        eprintln!(
            "nao-rs capture: loaded the usbmon module (modprobe usbmon): the one change this makes"
        );
    }
    let mon = Mon::open(&mon_path)?;
    let out = File::create(&args.out)
        .map_err(|e| format!("{}: cannot create: {e}", args.out.display()))?;
    let mut w = BufWriter::new(out);
    let werr = |e: std::io::Error| format!("{}: cannot write: {e}", args.out.display());
    w.write_all(&pcap_header()).map_err(werr)?;
    eprintln!(
        "nao-rs capture: chest board bus {bus} device {dev}; reading {} for {} s{}",
        mon_path.display(),
        args.seconds,
        match &hal {
            Some((u, _)) => format!(
                ", restarting HAL ({u:?}) after {} s",
                restart_after(args.seconds).as_secs_f32()
            ),
            None => ", no restart".into(),
        }
    );

    let start = Instant::now();
    let end = start + Duration::from_secs(u64::from(args.seconds));
    let restart_at = start + restart_after(args.seconds);
    let mut restarting: Option<Child> = None;
    let mut restart_result: Option<Result<i32, String>> = if restart { None } else { Some(Ok(0)) };
    let mut filter = ChestFilter::new(bus, dev);
    let mut buf = Box::new([0u8; MON_HEADER_LEN + MAX_DATA]);
    let mut ready = Vec::new();
    let mut record = Vec::with_capacity(MON_HEADER_LEN + 1024);
    let (mut seen, mut kept) = (0usize, 0usize);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if let Some((unit, ubus)) = &hal {
            if restarting.is_none() && restart_result.is_none() && now >= restart_at {
                match spawn(&systemctl(unit, *ubus, "restart", &[])) {
                    Ok(c) => restarting = Some(c),
                    Err(e) => restart_result = Some(Err(e)),
                }
            }
        }
        if let Some(c) = &mut restarting {
            if let Ok(Some(s)) = c.try_wait() {
                restart_result = Some(Ok(s.code().unwrap_or(-1)));
                restarting = None;
            }
        }
        if !mon.wait((end - now).min(Duration::from_millis(100)))? {
            continue;
        }
        let Some(n) = mon.get(&mut buf)? else {
            continue;
        };
        seen += 1;
        let Some(h) = MonHeader::parse(&buf[..n]) else {
            continue;
        };
        filter.offer(&h, buf[..n].to_vec(), &mut ready);
        for event in ready.drain(..) {
            let Some(h) = MonHeader::parse(&event) else {
                continue;
            };
            record.clear();
            pcap_record(&h, &event, &mut record);
            w.write_all(&record).map_err(werr)?;
            kept += 1;
        }
    }
    let dropped = mon.dropped();
    let file = w.into_inner().map_err(|e| werr(e.into_error()))?;
    file.sync_all().map_err(werr)?;
    drop(file);
    if let Some(mut c) = restarting.take() {
        let grace = Instant::now() + RESTART_GRACE;
        restart_result = Some(loop {
            match c.try_wait() {
                Ok(Some(s)) => break Ok(s.code().unwrap_or(-1)),
                Ok(None) if Instant::now() >= grace => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break Err(format!(
                        "the restart of HAL did not end within {} s after the capture (killed the systemctl)",
                        RESTART_GRACE.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => break Err(e.to_string()),
            }
        });
    }
    let sha = sha256_of(&args.out)?;
    let devs: Vec<String> = filter.devices().iter().map(|d| d.to_string()).collect();
    eprintln!(
        "nao-rs capture: {kept} of {seen} usbmon events kept (bus {bus}, device {}); {} dropped by the kernel",
        devs.join(" then "),
        dropped.map_or("? (stats unreadable)".into(), |d| d.to_string())
    );
    println!("{} sha256={sha}", args.out.display());
    match restart_result {
        Some(Ok(0)) => Ok(()),
        Some(Ok(code)) => Err(format!(
            "the capture is written, but restarting HAL failed (systemctl exit {code}): the capture \
             may hold no start-up; check `systemctl status` of the unit"
        )),
        Some(Err(e)) => Err(format!("the capture is written, but {e}")),
        None => Err("the capture is written, but HAL was not restarted (the capture ended first); use a longer --seconds".into()),
    }
}

/// When HAL is restarted: after 30 % of the time, at least 1 s.
fn restart_after(seconds: u32) -> Duration {
    Duration::from_millis((u64::from(seconds) * 300).max(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A usbmon header in host order, with `data` after it.
    fn event(
        kind: u8,
        (xfer, ep): (u8, u8),
        (bus, dev): (u16, u8),
        id: u64,
        setup: Option<[u8; 8]>,
        status: i32,
        data: &[u8],
    ) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&id.to_ne_bytes());
        e.extend_from_slice(&[kind, xfer, ep, dev]);
        e.extend_from_slice(&bus.to_ne_bytes());
        e.push(if setup.is_some() { 0 } else { b'-' });
        e.push(if data.is_empty() { b'<' } else { 0 });
        e.extend_from_slice(&1_700_000_000i64.to_ne_bytes());
        e.extend_from_slice(&123_456i32.to_ne_bytes());
        e.extend_from_slice(&status.to_ne_bytes());
        e.extend_from_slice(&(data.len() as u32).to_ne_bytes());
        e.extend_from_slice(&(data.len() as u32).to_ne_bytes());
        e.extend_from_slice(&setup.unwrap_or([0; 8]));
        e.extend_from_slice(&[0; 16]);
        e.extend_from_slice(data);
        e
    }

    fn offer(f: &mut ChestFilter, e: Vec<u8>) -> Vec<Vec<u8>> {
        let h = MonHeader::parse(&e).expect("a header");
        let mut out = Vec::new();
        f.offer(&h, e, &mut out);
        out
    }

    fn descriptor(ids: (u16, u16)) -> Vec<u8> {
        let mut d = vec![0u8; 18];
        d[0] = 18;
        d[1] = 1;
        d[8..10].copy_from_slice(&ids.0.to_le_bytes());
        d[10..12].copy_from_slice(&ids.1.to_le_bytes());
        d
    }

    #[test]
    fn capture_reads_the_usbmon_header_in_host_order() {
        let e = event(
            b'C',
            (3, 0x81),
            (1, 5),
            0xdead_beef,
            None,
            -110,
            &[0x5a, 1, 2],
        );
        let h = MonHeader::parse(&e).expect("64 bytes");
        assert_eq!(
            h,
            MonHeader {
                id: 0xdead_beef,
                kind: b'C',
                xfer: 3,
                ep: 0x81,
                dev: 5,
                bus: 1,
                setup: None,
                ts_sec: 1_700_000_000,
                ts_usec: 123_456,
                status: -110,
                length: 3,
                len_cap: 3,
            }
        );
        assert_eq!(MonHeader::parse(&e[..63]), None);
        let s = event(
            b'S',
            (2, 0),
            (1, 5),
            1,
            Some([0x40, 5, 0x24, 0, 0, 0, 0, 0]),
            -115,
            &[],
        );
        assert_eq!(
            MonHeader::parse(&s).and_then(|h| h.setup),
            Some([0x40, 5, 0x24, 0, 0, 0, 0, 0])
        );
    }

    #[test]
    fn capture_keeps_the_chest_board_and_drops_other_devices_and_buses() {
        let mut f = ChestFilter::new(1, 5);
        let frame = event(b'S', (3, 0x02), (1, 5), 1, None, -115, &[0xa5, 0, 0, 0]);
        assert_eq!(offer(&mut f, frame.clone()), vec![frame]);
        // A mouse on the same bus, the board's number on another bus, device 0.
        assert!(offer(
            &mut f,
            event(b'C', (1, 0x81), (1, 2), 2, None, 0, &[1, 2, 3, 4])
        )
        .is_empty());
        assert!(offer(&mut f, event(b'C', (3, 0x81), (2, 5), 3, None, 0, &[0x5a])).is_empty());
        assert!(offer(
            &mut f,
            event(
                b'S',
                (2, 0),
                (1, 0),
                4,
                Some([0, 5, 9, 0, 0, 0, 0, 0]),
                -115,
                &[]
            )
        )
        .is_empty());
        assert_eq!(f.devices(), &[5]);
    }

    #[test]
    fn capture_follows_the_chest_board_to_its_new_device_number() {
        let mut f = ChestFilter::new(1, 5);
        // The board re-enumerates as 9: GET_DESCRIPTOR (device), held until
        // its answer names ffff:0006, then written in order.
        let ask = event(
            b'S',
            (2, 0x80),
            (1, 9),
            10,
            Some([0x80, 6, 0, 1, 0, 0, 18, 0]),
            -115,
            &[],
        );
        assert!(offer(&mut f, ask.clone()).is_empty());
        let answer = event(b'C', (2, 0x80), (1, 9), 10, None, 0, &descriptor(CHEST_IDS));
        assert_eq!(offer(&mut f, answer.clone()), vec![ask, answer]);
        let next = event(
            b'S',
            (2, 0),
            (1, 9),
            11,
            Some([0, 9, 1, 0, 0, 0, 0, 0]),
            -115,
            &[],
        );
        assert_eq!(offer(&mut f, next.clone()), vec![next]);
        assert_eq!(f.devices(), &[5, 9]);
        // Another device enumerated as 10 is dropped, its held events too.
        let ask = event(
            b'S',
            (2, 0x80),
            (1, 10),
            12,
            Some([0x80, 6, 0, 1, 0, 0, 18, 0]),
            -115,
            &[],
        );
        assert!(offer(&mut f, ask).is_empty());
        let answer = event(
            b'C',
            (2, 0x80),
            (1, 10),
            12,
            None,
            0,
            &descriptor((0x046d, 0xc077)),
        );
        assert!(offer(&mut f, answer).is_empty());
        assert!(offer(&mut f, event(b'C', (1, 0x81), (1, 10), 13, None, 0, &[1])).is_empty());
        assert_eq!(f.devices(), &[5, 9]);
        // A device that sends the protocol's vendor request is the board.
        let start = event(
            b'S',
            (2, 0),
            (1, 11),
            14,
            Some([0x40, 1, 0, 0, 0, 0, 0, 0]),
            -115,
            &[],
        );
        assert_eq!(offer(&mut f, start.clone()), vec![start]);
        assert_eq!(f.devices(), &[5, 9, 11]);
    }

    #[test]
    fn capture_holds_at_most_held_max_events_of_an_undecided_device() {
        let mut f = ChestFilter::new(1, 5);
        for id in 0..(HELD_MAX as u64 + 10) {
            assert!(offer(&mut f, event(b'C', (3, 0x81), (1, 7), id, None, 0, &[1])).is_empty());
        }
        assert_eq!(f.held.len(), HELD_MAX);
        let start = event(
            b'S',
            (2, 0),
            (1, 7),
            999,
            Some([0x40, 1, 0, 0, 0, 0, 0, 0]),
            -115,
            &[],
        );
        let out = offer(&mut f, start);
        assert_eq!(out.len(), HELD_MAX + 1);
        // The oldest were dropped: the first written is event 10.
        assert_eq!(MonHeader::parse(&out[0]).map(|h| h.id), Some(10));
    }

    #[test]
    fn capture_writes_pcap_records_of_link_type_220() {
        let h = pcap_header();
        assert_eq!(u32::from_ne_bytes([h[0], h[1], h[2], h[3]]), 0xa1b2_c3d4);
        assert_eq!(u32::from_ne_bytes([h[20], h[21], h[22], h[23]]), 220);
        // A bulk IN submission: 512 asked, nothing delivered.
        let e = event(b'S', (3, 0x81), (1, 5), 1, None, -115, &[]);
        let mut e2 = e.clone();
        e2[32..36].copy_from_slice(&512u32.to_ne_bytes());
        let hd = MonHeader::parse(&e2).expect("header");
        let mut out = Vec::new();
        pcap_record(&hd, &e2, &mut out);
        let u = |at: usize| u32::from_ne_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]);
        assert_eq!(
            (u(0), u(4), u(8), u(12)),
            (1_700_000_000, 123_456, 64, 64 + 512)
        );
        assert_eq!(&out[16..], &e2[..]);
    }

    #[test]
    fn capture_pcap_is_what_nao_rs_usbmon_imports() {
        let setup = |s: [u8; 8]| Some(s);
        let mut f = ChestFilter::new(1, 5);
        let events = [
            event(
                b'S',
                (2, 0),
                (1, 5),
                1,
                setup([0, 9, 1, 0, 0, 0, 0, 0]),
                -115,
                &[],
            ),
            event(b'C', (2, 0), (1, 5), 1, None, 0, &[]),
            event(b'C', (1, 0x81), (1, 2), 2, None, 0, &[1, 2, 3, 4]),
            event(
                b'S',
                (2, 0),
                (1, 5),
                3,
                setup([0x40, 1, 0, 0, 0, 0, 0, 0]),
                -115,
                &[],
            ),
            event(b'C', (2, 0), (1, 5), 3, None, 0, &[]),
            event(b'S', (3, 0x02), (1, 5), 4, None, -115, &[0xa5, 0, 0, 0]),
            event(b'C', (3, 0x02), (1, 5), 4, None, 0, &[]),
            // Re-enumerated as device 9, then its START again.
            event(
                b'S',
                (2, 0x80),
                (1, 9),
                5,
                setup([0x80, 6, 0, 1, 0, 0, 18, 0]),
                -115,
                &[],
            ),
            event(b'C', (2, 0x80), (1, 9), 5, None, 0, &descriptor(CHEST_IDS)),
            event(
                b'S',
                (2, 0),
                (1, 9),
                6,
                setup([0, 9, 1, 0, 0, 0, 0, 0]),
                -115,
                &[],
            ),
            event(b'C', (2, 0), (1, 9), 6, None, 0, &[]),
        ];
        let mut pcap = pcap_header().to_vec();
        let mut ready = Vec::new();
        for e in events {
            let h = MonHeader::parse(&e).expect("header");
            f.offer(&h, e, &mut ready);
            for r in ready.drain(..) {
                let h = MonHeader::parse(&r).expect("header");
                pcap_record(&h, &r, &mut pcap);
            }
        }
        let i = nao_rs_usbmon::import(&pcap, &nao_rs_usbmon::ImportOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.devices, vec![(1, 5), (1, 9)]);
        let calls: Vec<&str> = i.text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            calls,
            [
                "nao-rs recording 1",
                "open ffff:0006",
                "set_configuration 1",
                "control_out 40 01 0000 0000 -",
                "claim_interface 0",
                "bulk_out 02 a5000000",
                "close",
                "open ffff:0006",
                "set_configuration 1",
                "claim_interface 0",
            ],
            "{}",
            i.text
        );
    }

    #[test]
    fn capture_restarts_the_hal_unit_where_it_lives() {
        assert_eq!(
            parse_hal_unit("hal.service"),
            Ok(HalUnit::System("hal.service".into()))
        );
        let user = parse_hal_unit("nao:hal.service").expect("user unit");
        assert_eq!(
            user,
            HalUnit::User {
                user: "nao".into(),
                unit: "hal.service".into()
            }
        );
        assert!(parse_hal_unit("hal; reboot").is_err());
        assert!(parse_hal_unit(":hal").is_err());
        let sys = HalUnit::System("hal.service".into());
        assert_eq!(
            systemctl(&sys, UserBus::Machine, "restart", &[]),
            ["systemctl", "restart", "hal.service"]
        );
        assert_eq!(
            systemctl(&user, UserBus::Machine, "is-active", &["--quiet"]),
            [
                "systemctl",
                "--user",
                "-M",
                "nao@",
                "is-active",
                "--quiet",
                "hal.service"
            ]
        );
        assert_eq!(
            systemctl(&user, UserBus::Su { uid: 1001 }, "restart", &[]),
            [
                "su",
                "nao",
                "-c",
                "XDG_RUNTIME_DIR=/run/user/1001 systemctl --user restart hal.service"
            ]
        );
        let passwd = "root:x:0:0:root:/root:/bin/sh\nnao:x:1001:1001::/home/nao:/bin/bash\n";
        assert_eq!(uid_in_passwd(passwd, "nao"), Some(1001));
        assert_eq!(uid_in_passwd(passwd, "hal"), None);
    }

    #[test]
    fn capture_ioctl_numbers_are_the_kernels() {
        // include/uapi/linux/usb/... (drivers/usb/mon/mon_bin.c): on a
        // 64-bit target struct mon_get_arg is 24 bytes, on a 32-bit one 12.
        let getx = if cfg!(target_pointer_width = "64") {
            0x4018_920a
        } else {
            0x400c_920a
        };
        assert_eq!(MON_IOCX_GETX, getx);
        assert_eq!(MON_IOCG_STATS, 0x8008_9203);
        assert_eq!(MON_IOCT_RING_SIZE, 0x9204);
    }

    #[test]
    fn capture_restarts_hal_part_way() {
        assert_eq!(restart_after(10), Duration::from_secs(3));
        assert_eq!(restart_after(2), Duration::from_secs(1));
    }
}
