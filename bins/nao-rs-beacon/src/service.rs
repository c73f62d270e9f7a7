//! The robot's beacon service as pure rules: its settings from the
//! environment, one beacon from what the page and the runtime's status
//! file say, and the judgement of a network wake. The shell
//! (`src/main.rs`) reads the page and the files, keeps time and moves
//! datagrams; everything it decides is decided here (`docs/app.md`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use deathswitch::process::ProcessIdentity;
use deathswitch::{Damage, Snapshot};
use nao_runtime::status_file::{live_chest_button, StatusFile};
use nao_wire::JOINTS;

use nao_rs_beacon::auth::{self, TeamKey, WakeDatagram, WakeRefusal};
use nao_rs_beacon::format::{Beacon, Guard, Hottest, Motion, PageHealth, SwitchPosition};

/// The default beacon port on the operator's laptop.
pub const BEACON_PORT: u16 = 7702;
/// The default network wake port on the robot.
pub const WAKE_PORT: u16 = 7703;
/// The default beacon rate.
pub const DEFAULT_HZ: f64 = 2.0;
/// The highest beacon rate the settings accept.
pub const MAX_HZ: f64 = 20.0;
/// The lowest beacon rate the settings accept (one every 10 s).
pub const MIN_HZ: f64 = 0.1;
/// The team key's default path on the robot.
pub const KEY_PATH: &str = "/etc/nao-rs/team.key";
/// A runtime status older than this (by its `monotonic_ns`) is not shown:
/// the runtime that wrote it is hung or gone.
pub const STATUS_FRESH_NS: u64 = 1_000_000_000;

/// Whether a status file written at `written_ns` (its `monotonic_ns`) is
/// fresh at `now_ns` (the beacon's own `CLOCK_MONOTONIC`, read after the
/// file): at most [`STATUS_FRESH_NS`] old, and not from the future. One
/// clock on one machine: a time ahead of the reader's is no runtime's
/// (another member of group `hal` wrote the file, or the runtime's writes
/// are blocked and what is there is made up), so it is stale, not fresh
/// for ever.
pub fn status_fresh(written_ns: u64, now_ns: u64) -> bool {
    written_ns <= now_ns && now_ns - written_ns <= STATUS_FRESH_NS
}

/// The rule of the refused network wakes' log: at most
/// [`RefusalWindow::BURST`] lines in a window of 1 s (a window starts at
/// the first refusal after the last one ended); the refusals beyond are
/// counted and the count goes with the next line logged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalWindow {
    start_ns: Option<u64>,
    lines: u32,
    quiet: u64,
}

impl RefusalWindow {
    /// Lines a window may log.
    pub const BURST: u32 = 10;
    /// A window's length, ns.
    pub const WINDOW_NS: u64 = 1_000_000_000;

    /// A refusal at `now_ns`: `Some(n)` to log it, with the `n` refusals
    /// not logged before it; `None` to count it only.
    pub fn refused(&mut self, now_ns: u64) -> Option<u64> {
        if self
            .start_ns
            .map_or(true, |t| now_ns.saturating_sub(t) >= Self::WINDOW_NS)
        {
            self.start_ns = Some(now_ns);
            self.lines = 0;
        }
        if self.lines >= Self::BURST {
            self.quiet += 1;
            return None;
        }
        self.lines += 1;
        Some(std::mem::take(&mut self.quiet))
    }
}

/// Where the beacons go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// No beacon at all (a game network: extra traffic counts against a
    /// team). The network wake still listens when a key is there.
    Off,
    /// Only to the configured targets.
    Unicast,
    /// To every interface's subnet broadcast address, and the targets.
    Broadcast,
}

/// The service's settings (`docs/app.md`, "The beacon service").
#[derive(Debug, Clone, PartialEq)]
pub struct BeaconSettings {
    /// `NAO_RS_BEACON`: `off`, `unicast` or `broadcast` (default).
    pub mode: Mode,
    /// `NAO_RS_BEACON_TARGETS`: comma-separated `host` or `host:port`.
    pub targets: Vec<SocketAddr>,
    /// `NAO_RS_BEACON_HZ` (default 2).
    pub hz: f64,
    /// `NAO_RS_BEACON_PORT`: the app's port (default 7702).
    pub beacon_port: u16,
    /// `NAO_RS_WAKE_PORT`: the network wake's port (default 7703; 0: off).
    pub wake_port: u16,
    /// `NAO_RS_TEAM_KEY` (default `/etc/nao-rs/team.key`).
    pub key_path: PathBuf,
    /// `NAO_RS_ROBOT_NAME` (default: the host name).
    pub name: String,
    /// `NAO_RS_BODY_ID` (default: the host name): the app's key for a robot.
    pub body_id: String,
}

/// A setting that cannot be used: the variable, the value and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError(pub String);

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A body id or name as the beacon format takes it: 1..=32 bytes of
/// `A-Z a-z 0-9 . _ : -`.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= nao_rs_beacon::format::MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

impl BeaconSettings {
    /// The settings from `var` (the environment, passed in) and the host
    /// name.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        hostname: &str,
    ) -> Result<BeaconSettings, SettingError> {
        let get = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let mode = match get("NAO_RS_BEACON").as_deref().map(str::trim) {
            None | Some("broadcast") => Mode::Broadcast,
            Some("unicast") => Mode::Unicast,
            Some("off") => Mode::Off,
            Some(v) => {
                return Err(SettingError(format!(
                    "NAO_RS_BEACON={v:?}: use off, unicast or broadcast"
                )))
            }
        };
        let port = |k: &str, default: u16| -> Result<u16, SettingError> {
            match get(k) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| SettingError(format!("{k}={v:?} is not a port (0..=65535)"))),
            }
        };
        let beacon_port = port("NAO_RS_BEACON_PORT", BEACON_PORT)?;
        let wake_port = port("NAO_RS_WAKE_PORT", WAKE_PORT)?;
        let hz = match get("NAO_RS_BEACON_HZ") {
            None => DEFAULT_HZ,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(h) if (MIN_HZ..=MAX_HZ).contains(&h) => h,
                _ => {
                    return Err(SettingError(format!(
                        "NAO_RS_BEACON_HZ={v:?}: give a rate from {MIN_HZ} to {MAX_HZ} beacons a second"
                    )))
                }
            },
        };
        let mut targets = Vec::new();
        for t in get("NAO_RS_BEACON_TARGETS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            targets.push(target(t, beacon_port)?);
        }
        if mode == Mode::Unicast && targets.is_empty() {
            return Err(SettingError(
                "NAO_RS_BEACON=unicast needs NAO_RS_BEACON_TARGETS (the operators' addresses, \
                 comma-separated), or NAO_RS_BEACON=off"
                    .into(),
            ));
        }
        let named = |k: &str| -> Result<String, SettingError> {
            let v = get(k).unwrap_or_else(|| hostname.to_string());
            if plain(v.trim()) {
                Ok(v.trim().to_string())
            } else {
                Err(SettingError(format!(
                    "{k}={v:?}: 1 to 32 characters of A-Z a-z 0-9 . _ : - (set {k})"
                )))
            }
        };
        Ok(BeaconSettings {
            mode,
            targets,
            hz,
            beacon_port,
            wake_port,
            key_path: get("NAO_RS_TEAM_KEY").map_or_else(|| PathBuf::from(KEY_PATH), PathBuf::from),
            name: named("NAO_RS_ROBOT_NAME")?,
            body_id: named("NAO_RS_BODY_ID")?,
        })
    }
}

/// One target: `host` (the beacon port) or `host:port`.
fn target(t: &str, port: u16) -> Result<SocketAddr, SettingError> {
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if let Ok(sa) = t.parse::<SocketAddr>() {
        return Ok(sa);
    }
    let with_port = if t.contains(':') {
        t.to_string()
    } else {
        format!("{t}:{port}")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(SocketAddr::is_ipv4))
        .ok_or_else(|| {
            SettingError(format!(
                "NAO_RS_BEACON_TARGETS: {t:?} is no address (give an IP address, host or host:port)"
            ))
        })
}

/// What the page says, as the beacon service read it (read-only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageView {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// What is wrong with the page, if anything (then it reads tripped).
    pub damage: Option<Damage>,
    /// The runtime the page names runs (pid and start time).
    pub driver_alive: bool,
    /// The guard the page names runs.
    pub guard_alive: bool,
}

impl PageView {
    /// The page's snapshot and damage, with the identities looked up.
    pub fn new(snapshot: Snapshot, damage: Option<Damage>) -> PageView {
        let alive = |pid: Option<u32>, start| {
            pid.is_some_and(|pid| ProcessIdentity { pid, start }.is_alive())
        };
        PageView {
            snapshot,
            damage,
            driver_alive: alive(snapshot.driver_pid, snapshot.driver_start),
            guard_alive: alive(snapshot.guard_pid, snapshot.guard_start),
        }
    }

    /// Armed, on a sound page.
    pub fn armed(&self) -> bool {
        self.snapshot.armed && self.damage.is_none()
    }

    /// The wake generation a wake must carry (none while tripped or
    /// damaged).
    pub fn wake_generation(&self) -> Option<u64> {
        if self.damage.is_some() {
            None
        } else {
            self.snapshot.wake_generation()
        }
    }
}

fn per_mille(v: u32) -> f32 {
    (v.min(1000) as f32) / 1000.0
}

/// The beacon for one tick. Pure: the page as read, the runtime's status
/// file if any, the clocks and the key's presence are passed in.
#[allow(clippy::too_many_arguments)]
pub fn compose(
    settings: &BeaconSettings,
    seq: u64,
    page: &PageView,
    status: Option<&StatusFile>,
    now_ns: u64,
    net_wake: bool,
) -> Beacon {
    let s = &page.snapshot;
    let armed = page.armed();
    let reason = if page.damage.is_some() {
        Some(deathswitch::Reason::PageLost)
    } else {
        s.reason
    };
    let since_ns = if armed {
        s.armed_at_unix_ns
    } else {
        s.tripped_at_unix_ns
    };
    // The chest button mode by naoctl's rule (the file of the page's live
    // runtime), fresh or not: a runtime's mode is fixed for its life.
    let chest_button = status.and_then(|st| {
        live_chest_button(st.pid, &st.chest_button, s.driver_pid, page.driver_alive)
    });
    // The runtime's own status only while it is fresh and the page names
    // a live runtime: a hung or dead runtime's last words are not shown.
    let status = status.filter(|st| page.driver_alive && status_fresh(st.monotonic_ns, now_ns));
    let motion = if page.driver_alive {
        Motion::from_name(s.motion.name()).unwrap_or(Motion::None)
    } else {
        Motion::None
    };
    let stiffness = status.and_then(|st| {
        (st.stiffness.len() == JOINTS).then(|| {
            let mut a = [0.0f32; JOINTS];
            for (o, &v) in a.iter_mut().zip(&st.stiffness) {
                *o = per_mille(u32::from(v));
            }
            a
        })
    });
    let temperature = status.and_then(|st| {
        (st.temperature_c.len() == JOINTS).then(|| {
            let mut a = [0i16; JOINTS];
            for (o, &v) in a.iter_mut().zip(&st.temperature_c) {
                *o = i16::from(v);
            }
            a
        })
    });
    let beacon = Beacon {
        seq,
        name: settings.name.clone(),
        body_id: settings.body_id.clone(),
        switch: if armed {
            SwitchPosition::Armed
        } else {
            SwitchPosition::Tripped
        },
        reason: reason.map(|r| r.name().to_string()),
        since: (since_ns != 0).then_some(since_ns / 1_000_000_000),
        trip_count: s.trip_count,
        wake_generation: page.wake_generation(),
        nonce: s.nonce,
        page: match page.damage {
            None => PageHealth::Ok,
            Some(d) => PageHealth::Damaged(d.name().to_string()),
        },
        heartbeat_age_ms: s.last_beat_ns.map(|t| now_ns.saturating_sub(t) / 1_000_000),
        guard: Guard {
            pid: s.guard_pid,
            alive: page.guard_alive,
            holding: s.guard_holding,
        },
        motion,
        flags: deathswitch::flags::names(s.safety_flags)
            .take(8)
            .map(|n| n.into_owned())
            .collect(),
        max_stiffness: status.map(|st| per_mille(st.max_stiffness)),
        lateness_ms: status.map(|st| (st.lateness_us as f32 / 1000.0).min(60_000.0)),
        battery: status
            .filter(|st| st.cycle > 0)
            .map(|st| per_mille(u32::from(st.battery.charge_per_mille))),
        hottest: status
            .and_then(|st| st.hottest_joint.as_ref())
            .map(|h| Hottest {
                joint: h.name.clone(),
                degc: i16::from(h.temperature_c),
            }),
        stiffness,
        temperature,
        net_wake,
        chest_button,
    };
    // Whatever the inputs held, what goes out decodes.
    beacon.sanitized()
}

/// What to do with a network wake datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeVerdict {
    /// Verified: pass `wake <generation>` to the runtime's wake socket.
    Pass {
        /// The generation the wake names (the page's, verified).
        generation: u64,
        /// The key that signed it.
        key_id: String,
    },
    /// Refused, and why (for the log).
    Refuse(WakeRefusal),
}

/// The judgement of a network wake datagram against the page as read now.
/// Pure: the key (none: network wake is off, every wake refused), the
/// datagram, this robot's body id and the page are passed in.
pub fn judge_wake(
    key: Option<&TeamKey>,
    datagram: &[u8],
    body_id: &str,
    page: &PageView,
) -> WakeVerdict {
    let d = match WakeDatagram::decode(datagram) {
        Ok(d) => d,
        Err(e) => return WakeVerdict::Refuse(e),
    };
    match auth::verify(
        key,
        &d,
        body_id,
        page.snapshot.nonce,
        page.wake_generation(),
    ) {
        Ok(()) => WakeVerdict::Pass {
            generation: d.generation,
            key_id: d.key_id,
        },
        Err(e) => WakeVerdict::Refuse(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deathswitch::{Beat, MemorySwitch, Reason, Switch};
    use nao_rs_beacon::auth::{sign, WakeRefusalKind};

    #[test]
    fn network_wake_refusals_are_logged_at_most_ten_a_second_and_the_rest_counted() {
        const MS: u64 = 1_000_000;
        let mut w = RefusalWindow::default();
        let t0 = 7_000 * MS;
        for k in 0..10 {
            assert_eq!(w.refused(t0 + k * MS), Some(0), "line {k}");
        }
        assert_eq!(w.refused(t0 + 10 * MS), None, "the 11th in the window");
        assert_eq!(w.refused(t0 + 999 * MS), None);
        // A new window 1 s after the last began: logged, with the count.
        assert_eq!(w.refused(t0 + 1_000 * MS), Some(2));
        assert_eq!(w.refused(t0 + 1_001 * MS), Some(0));
    }

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn settings_default_to_broadcast_at_2_hz_and_name_every_bad_value() {
        let s = BeaconSettings::from_vars(vars(&[]), "nao24").unwrap();
        assert_eq!(s.mode, Mode::Broadcast);
        assert_eq!((s.hz, s.beacon_port, s.wake_port), (2.0, 7702, 7703));
        assert_eq!((s.name.as_str(), s.body_id.as_str()), ("nao24", "nao24"));
        assert_eq!(s.key_path, PathBuf::from(KEY_PATH));
        let s = BeaconSettings::from_vars(
            vars(&[
                ("NAO_RS_BEACON", "unicast"),
                ("NAO_RS_BEACON_TARGETS", "127.0.0.1, 127.0.0.2:9000"),
                ("NAO_RS_BEACON_HZ", "5"),
                ("NAO_RS_BODY_ID", "P0000074A05S94300027"),
            ]),
            "nao24",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::Unicast);
        assert_eq!(
            s.targets,
            [
                "127.0.0.1:7702".parse().unwrap(),
                "127.0.0.2:9000".parse().unwrap()
            ]
        );
        assert_eq!(s.body_id, "P0000074A05S94300027");
        for (k, v, says) in [
            ("NAO_RS_BEACON", "loud", "off, unicast or broadcast"),
            ("NAO_RS_BEACON_HZ", "0", "from 0.1 to 20"),
            ("NAO_RS_BEACON_HZ", "nan", "from 0.1 to 20"),
            ("NAO_RS_BEACON_PORT", "70000", "not a port"),
            ("NAO_RS_BODY_ID", "a b", "NAO_RS_BODY_ID"),
            ("NAO_RS_BEACON_TARGETS", "robot:notaport", "no address"),
        ] {
            let e = BeaconSettings::from_vars(vars(&[(k, v)]), "nao").unwrap_err();
            assert!(e.0.contains(says), "{k}={v}: {e}");
        }
        let e =
            BeaconSettings::from_vars(vars(&[("NAO_RS_BEACON", "unicast")]), "nao").unwrap_err();
        assert!(e.0.contains("NAO_RS_BEACON_TARGETS"), "{e}");
    }

    fn view(c: &MemorySwitch, driver_alive: bool) -> PageView {
        PageView {
            snapshot: c.snapshot(),
            damage: None,
            driver_alive,
            guard_alive: true,
        }
    }

    fn settings() -> BeaconSettings {
        BeaconSettings::from_vars(vars(&[]), "nao1").unwrap()
    }

    fn status(now: u64) -> StatusFile {
        let mut st: StatusFile = serde_json::from_str(
            r#"{"cycle":5,"cycle_allocations":null,"flags":[],"lateness_us":1500,"limp":false,
                "max_lateness_us":0,"max_stiffness":600,"overruns":0,"reason":null,"tripped":false}"#,
        )
        .unwrap();
        st.monotonic_ns = now;
        st.stiffness = vec![600; JOINTS];
        st.temperature_c = vec![40; JOINTS];
        st.battery.charge_per_mille = 800;
        st
    }

    #[test]
    fn a_beacon_says_the_page_and_a_fresh_status_of_a_live_runtime_only() {
        let c = MemorySwitch::armed();
        c.register(42);
        let now = 10_000_000_000;
        // The runtime's beat: limp, waiting for a wake.
        c.beat(&Beat {
            cycle: 0,
            t_ns: now - 12_000_000,
            all_off: true,
            motion: deathswitch::Motion::LimpWaitingForWake,
            safety_flags: 0,
        });
        let st = status(now - 100_000_000);
        let b = compose(&settings(), 7, &view(&c, true), Some(&st), now, true);
        assert_eq!(b.switch, SwitchPosition::Armed);
        assert_eq!(b.wake_generation, c.snapshot().wake_generation());
        assert!(b.wake_generation.is_some());
        assert_eq!(b.nonce, c.snapshot().nonce);
        assert_ne!(b.nonce, 0, "a whole page's nonce");
        assert_eq!(b.motion, Motion::LimpWaitingForWake);
        assert_eq!(b.max_stiffness, Some(0.6));
        assert_eq!(b.battery, Some(0.8));
        assert_eq!(b.lateness_ms, Some(1.5));
        assert!(b.net_wake);
        assert_eq!(
            nao_rs_beacon::format::decode(&nao_rs_beacon::format::encode(&b)).unwrap(),
            b
        );
        // A stale status (a hung runtime) is not shown.
        let old = status(now - 2 * STATUS_FRESH_NS);
        let b = compose(&settings(), 8, &view(&c, true), Some(&old), now, false);
        assert_eq!((b.max_stiffness, b.stiffness), (None, None));
        // A status from the future (the beacon's own clock is the judge)
        // is stale too, however long it stays there.
        for ahead in [1, 2 * STATUS_FRESH_NS, u64::MAX - now] {
            let future = status(now + ahead);
            let b = compose(&settings(), 8, &view(&c, true), Some(&future), now, false);
            assert_eq!(
                (b.max_stiffness, b.battery),
                (None, None),
                "{ahead} ns ahead"
            );
        }
        // A dead runtime says nothing about the joints.
        let b = compose(&settings(), 9, &view(&c, false), Some(&st), now, false);
        assert_eq!((b.motion, b.max_stiffness), (Motion::None, None));
        // Tripped: no generation; damaged: page-lost, named.
        c.trip(Reason::Udp);
        let b = compose(&settings(), 10, &view(&c, true), None, now, false);
        assert_eq!(
            (b.switch, b.wake_generation),
            (SwitchPosition::Tripped, None)
        );
        assert_eq!(b.reason.as_deref(), Some("udp"));
        let damaged = PageView {
            damage: Some(Damage::NoMagic),
            ..view(&MemorySwitch::armed(), true)
        };
        let b = compose(&settings(), 11, &damaged, None, now, false);
        assert_eq!(b.switch, SwitchPosition::Tripped);
        assert_eq!(b.reason.as_deref(), Some("page-lost"));
        assert_eq!(b.page, PageHealth::Damaged("no-magic".into()));
        assert_eq!(b.wake_generation, None);
    }

    #[test]
    fn a_beacon_shows_the_chest_button_mode_of_the_page_s_live_runtime_only() {
        use nao_rs_beacon::format::ChestButtonMode;
        let c = MemorySwitch::armed();
        let now = 10_000_000_000;
        let mut st = status(now);
        st.pid = 42;
        st.chest_button = "hold:1000".into();
        let mut v = view(&c, true);
        v.snapshot.driver_pid = Some(42);
        let shown = |v: &PageView, st: Option<&StatusFile>| {
            let b = compose(&settings(), 1, v, st, now, false);
            // What goes out is what the app reads.
            let d = nao_rs_beacon::format::decode(&nao_rs_beacon::format::encode(&b)).unwrap();
            assert_eq!(d.chest_button, b.chest_button);
            b.chest_button
        };
        assert_eq!(
            shown(&v, Some(&st)),
            Some(ChestButtonMode::Hold { ms: 1000 })
        );
        // A stale file of the live runtime still names its mode: it is
        // fixed for the runtime's life.
        let mut old = st.clone();
        old.monotonic_ns = now - 10 * STATUS_FRESH_NS;
        assert_eq!(
            shown(&v, Some(&old)),
            Some(ChestButtonMode::Hold { ms: 1000 })
        );
        let trip = StatusFile {
            chest_button: "trip".into(),
            ..st.clone()
        };
        assert_eq!(shown(&v, Some(&trip)), Some(ChestButtonMode::Trip));
        // Unknown: no file, a file without the field, another process's
        // file, a dead runtime.
        assert_eq!(shown(&v, None), None);
        let before = StatusFile {
            chest_button: String::new(),
            ..st.clone()
        };
        assert_eq!(shown(&v, Some(&before)), None);
        let other = StatusFile {
            pid: 41,
            ..st.clone()
        };
        assert_eq!(shown(&v, Some(&other)), None);
        let dead = PageView {
            driver_alive: false,
            ..v
        };
        assert_eq!(shown(&dead, Some(&st)), None);
    }

    #[test]
    fn the_status_file_s_time_is_judged_against_the_beacon_s_clock_both_ways() {
        let s = STATUS_FRESH_NS;
        for (written, now, fresh) in [
            (100, 100, true),
            (100, 100 + s, true),
            (100, 101 + s, false),
            (0, u64::MAX, false),
            (101, 100, false),
            (100 + s, 100, false),
            (u64::MAX, 0, false),
            (u64::MAX, u64::MAX, true),
        ] {
            assert_eq!(
                status_fresh(written, now),
                fresh,
                "written {written}, now {now}"
            );
        }
    }

    fn key(b: u8) -> TeamKey {
        TeamKey::from_bytes(&[b; 32]).unwrap()
    }

    #[test]
    fn a_network_wake_passes_only_signed_by_the_team_key_for_this_page_and_epoch() {
        let c = MemorySwitch::armed();
        c.register(42);
        let k = key(1);
        let v = view(&c, true);
        let nonce = c.snapshot().nonce;
        let g1 = c.snapshot().wake_generation().unwrap();
        let good = sign(&k, "nao1", nonce, g1).encode();
        assert!(matches!(
            judge_wake(Some(&k), &good, "nao1", &v),
            WakeVerdict::Pass { generation, .. } if generation == g1
        ));
        let refused = |verdict| match verdict {
            WakeVerdict::Refuse(r) => r.kind(),
            WakeVerdict::Pass { .. } => panic!("passed"),
        };
        // No key on the robot: network wake is off.
        assert_eq!(
            refused(judge_wake(None, &good, "nao1", &v)),
            WakeRefusalKind::WrongKeyId
        );
        // Another team's key.
        let other = sign(&key(2), "nao1", nonce, g1).encode();
        assert!(matches!(
            refused(judge_wake(Some(&k), &other, "nao1", &v)),
            WakeRefusalKind::WrongKeyId | WakeRefusalKind::BadMac
        ));
        // Another robot's wake.
        let body = sign(&k, "nao2", nonce, g1).encode();
        assert_eq!(
            refused(judge_wake(Some(&k), &body, "nao1", &v)),
            WakeRefusalKind::OtherBody
        );
        // Garbage.
        assert_eq!(
            refused(judge_wake(Some(&k), b"NAO-RS WAKE 1\n{", "nao1", &v)),
            WakeRefusalKind::Malformed
        );
        // A recorded wake after the next trip and re-arm: another epoch.
        c.trip(Reason::Udp);
        let tripped = view(&c, true);
        assert_eq!(
            refused(judge_wake(Some(&k), &good, "nao1", &tripped)),
            WakeRefusalKind::NotArmed
        );
        c.rearm();
        assert_eq!(
            refused(judge_wake(Some(&k), &good, "nao1", &view(&c, true))),
            WakeRefusalKind::StaleGeneration
        );
        // After a repair (a new nonce), the same generation is no good either.
        let repaired = MemorySwitch::armed();
        repaired.register(42);
        repaired.damage();
        assert_eq!(repaired.read().reason, Some(Reason::PageLost));
        repaired.rearm();
        assert_ne!(repaired.snapshot().nonce, nonce, "a repair's new nonce");
        let g = repaired.snapshot().wake_generation().unwrap();
        let old_nonce = sign(&k, "nao1", nonce, g).encode();
        assert_eq!(
            refused(judge_wake(
                Some(&k),
                &old_nonce,
                "nao1",
                &view(&repaired, true)
            )),
            WakeRefusalKind::OtherNonce
        );
    }
}
