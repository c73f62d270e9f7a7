//! The status beacon: one UDP datagram a robot sends to the operator's
//! laptop (port [`PORT`]), `docs/app.md` "The beacon datagram".
//!
//! A datagram is the 16 ASCII bytes [`PREFIX`] (`NAO-RS BEACON 1\n`, the
//! format's version in it) followed by one compact JSON object. [`encode`]
//! never fails and never writes more than [`MAX_ENCODED`] bytes: it first
//! brings every field into its documented range ([`Beacon::sanitized`]).
//! [`decode`] takes any bytes and either returns a beacon whose every field
//! is in range or says what was wrong ([`BeaconDecodeError`]: a [`DecodeErrorKind`] and a detail). It
//! never panics. Readers ignore unknown JSON fields: fields may be added
//! within version 1; a change of a field's meaning bumps the version.

use serde::{Deserialize, Serialize};

/// The UDP port the operator's app listens on for beacons.
pub const PORT: u16 = 7702;

/// The format's version, the number in [`PREFIX`].
pub const VERSION: u32 = 1;

/// Every beacon of this version starts with these 16 ASCII bytes.
pub const PREFIX: &[u8; 16] = b"NAO-RS BEACON 1\n";

/// The prefix of every version: `NAO-RS BEACON ` then the version in
/// decimal and a newline.
pub const FAMILY: &[u8; 14] = b"NAO-RS BEACON ";

/// [`encode`] writes at most this many bytes (one datagram with room to
/// spare on any link: well under the 1,472 bytes of a 1,500-byte MTU).
pub const MAX_ENCODED: usize = 1200;

/// [`decode`] rejects longer datagrams without looking at them.
pub const MAX_DATAGRAM: usize = 1400;

/// The longest robot name and body id, in bytes.
pub const MAX_NAME: usize = 32;

/// The longest reason, damage, flag or joint name, in bytes.
pub const MAX_WORD: usize = 32;

/// The most safety flag names one beacon carries (page layout 3 has 8
/// flags; [`encode`] keeps the first 8 of more).
pub const MAX_FLAGS: usize = 8;

/// The number of joints: stiffness and temperature come in `nao_wire`'s
/// joint order (`nao_wire::Joint::ALL`).
pub const JOINTS: usize = nao_wire::JOINTS;

/// The lowest and highest temperature a beacon carries, in degC.
pub const TEMPERATURE_RANGE: (i16, i16) = (-60, 250);

/// The largest cycle lateness a beacon carries, in ms (one minute: any
/// lateness near it means the runtime is not running).
pub const MAX_LATENESS_MS: f32 = 60_000.0;

/// The death switch as the page says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchPosition {
    /// Motion allowed (after a person's re-arm).
    Armed,
    /// Every frame all-off.
    Tripped,
}

/// The runtime's motion state: the page's own type, carried by its name
/// (`deathswitch::Motion::name`, e.g. `"limp-waiting-for-wake"`).
pub use deathswitch::Motion;

/// The page's integrity: `"ok"`, or the name of the damage
/// (`deathswitch::damage::Damage::name()`, e.g. `"no-magic"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum PageHealth {
    /// A sound page.
    Ok,
    /// A damaged page, by the damage's name.
    Damaged(String),
}

impl From<String> for PageHealth {
    fn from(s: String) -> PageHealth {
        if s == "ok" {
            PageHealth::Ok
        } else {
            PageHealth::Damaged(s)
        }
    }
}

impl From<PageHealth> for String {
    fn from(i: PageHealth) -> String {
        match i {
            PageHealth::Ok => "ok".into(),
            PageHealth::Damaged(d) => d,
        }
    }
}

/// The guard as the page names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Guard {
    /// The guard's process id, if the page names one.
    pub pid: Option<u32>,
    /// The named guard process is alive (its pid with its start time).
    pub alive: bool,
    /// The guard holds the chest board (it took over from the runtime).
    pub holding: bool,
}

/// The hottest joint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hottest {
    /// Its LoLA name (`nao_wire::Joint::name()`).
    pub joint: String,
    /// Its temperature in degC.
    pub degc: i16,
}

/// One beacon: what a robot tells the operator's app, field by field
/// (`docs/app.md`). Fields the runtime publishes (battery, stiffness,
/// temperatures, lateness) are `None` when the beacon service has no
/// fresh runtime status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Beacon {
    /// Counts up by one each beacon since the service started.
    pub seq: u64,
    /// The robot's name (1..=32 bytes, no control characters, `"` or `\`).
    pub name: String,
    /// The body id (1..=32 bytes of `A-Z a-z 0-9 . _ : -`): the app's key
    /// for a robot.
    #[serde(rename = "body")]
    pub body_id: String,
    /// Armed or tripped.
    pub switch: SwitchPosition,
    /// The trip reason's name while tripped (`"udp"`, `"chest-button"`).
    pub reason: Option<String>,
    /// Unix seconds of the trip (tripped) or last re-arm (armed); for
    /// display only.
    pub since: Option<u64>,
    /// Armed -> tripped transitions since the page was made whole.
    pub trip_count: u64,
    /// `Some(trip_count)` while armed, `None` while tripped: what a network
    /// wake must carry.
    pub wake_generation: Option<u64>,
    /// The page's random nonce (new whenever the page is made whole); in
    /// JSON 16 lower-case hex digits.
    #[serde(with = "hex_u64")]
    pub nonce: u64,
    /// `ok` or the damage's name.
    pub page: PageHealth,
    /// Age of the runtime's last heartbeat, in ms; `None`: no beat since
    /// the page was cleared.
    pub heartbeat_age_ms: Option<u64>,
    /// The guard.
    pub guard: Guard,
    /// The runtime's motion state.
    #[serde(with = "motion_name")]
    pub motion: Motion,
    /// The safety flags raised, by name (at most 8).
    pub flags: Vec<String>,
    /// The last frame's largest stiffness, 0..=1.
    pub max_stiffness: Option<f32>,
    /// The last cycle's lateness in ms (0..=60,000).
    pub lateness_ms: Option<f32>,
    /// The battery's charge, 0..=1.
    pub battery: Option<f32>,
    /// The hottest joint.
    pub hottest: Option<Hottest>,
    /// Every joint's stiffness, 0..=1, in joint order.
    pub stiffness: Option<[f32; JOINTS]>,
    /// Every joint's temperature in degC, in joint order.
    pub temperature: Option<[i16; JOINTS]>,
    /// The robot has a team key: a network wake can be verified.
    pub net_wake: bool,
}

/// What was wrong with a datagram, as a value to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// Longer than [`MAX_DATAGRAM`].
    Oversized,
    /// Not a beacon: it does not start with `NAO-RS BEACON `.
    Prefix,
    /// A beacon of another version.
    Version,
    /// The JSON after the prefix is not a beacon object.
    Json,
    /// A field out of its range (a number, NaN, a name too long or with
    /// characters it may not have).
    Range,
}

impl crate::RefusalKind for DecodeErrorKind {
    const WHAT: &'static str = "not a beacon";

    fn name(self) -> &'static str {
        match self {
            DecodeErrorKind::Oversized => "oversized",
            DecodeErrorKind::Prefix => "prefix",
            DecodeErrorKind::Version => "version",
            DecodeErrorKind::Json => "json",
            DecodeErrorKind::Range => "range",
        }
    }
}

/// Why [`decode`] refused a datagram: its kind and a sentence naming the
/// value; shown as `not a beacon (<kind>): <sentence>`.
pub type BeaconDecodeError = crate::Refusal<DecodeErrorKind>;

/// The datagram of `beacon`: [`PREFIX`] and compact JSON, at most
/// [`MAX_ENCODED`] bytes. Out-of-range fields are brought into range first
/// ([`Beacon::sanitized`]), so [`decode`] accepts every result.
pub fn encode(beacon: &Beacon) -> Vec<u8> {
    let b = beacon.sanitized();
    let mut out = Vec::with_capacity(768);
    out.extend_from_slice(PREFIX);
    // Cannot fail: plain structs, string keys, finite numbers. Should it
    // ever, the datagram is the bare prefix, which the app counts as bad.
    let _ = serde_json::to_writer(&mut out, &b);
    out
}

/// The beacon in `datagram`, every field checked against its range.
pub fn decode(datagram: &[u8]) -> Result<Beacon, BeaconDecodeError> {
    use DecodeErrorKind as K;
    if datagram.len() > MAX_DATAGRAM {
        return Err(BeaconDecodeError::new(
            K::Oversized,
            format!(
                "{} bytes, a beacon has at most {MAX_DATAGRAM}",
                datagram.len()
            ),
        ));
    }
    let Some(rest) = datagram.strip_prefix(FAMILY.as_slice()) else {
        let head = &datagram[..datagram.len().min(16)];
        return Err(BeaconDecodeError::new(
            K::Prefix,
            format!(
                "starts with {:?}, not \"NAO-RS BEACON \"",
                String::from_utf8_lossy(head)
            ),
        ));
    };
    let Some(nl) = rest.iter().take(12).position(|&c| c == b'\n') else {
        return Err(BeaconDecodeError::new(
            K::Version,
            "no newline after the version number",
        ));
    };
    let version = &rest[..nl];
    if version != VERSION.to_string().as_bytes() {
        return Err(BeaconDecodeError::new(
            K::Version,
            format!(
                "version {:?}, this reader knows version {VERSION}",
                String::from_utf8_lossy(version)
            ),
        ));
    }
    let body = &rest[nl + 1..];
    let b: Beacon =
        serde_json::from_slice(body).map_err(|e| BeaconDecodeError::new(K::Json, e.to_string()))?;
    b.check()?;
    Ok(b)
}

impl Beacon {
    /// Checks every field against its documented range; [`decode`] runs it.
    /// The robot side may run it on a beacon it built to find a wrong
    /// input (a body id with a space, say) before [`encode`] rewrites it.
    pub fn check(&self) -> Result<(), BeaconDecodeError> {
        let range = |what: &str, why: String| {
            Err(BeaconDecodeError::new(
                DecodeErrorKind::Range,
                format!("{what}: {why}"),
            ))
        };
        if let Err(why) = check_name(&self.name) {
            return range("name", why);
        }
        if let Err(why) = check_body_id(&self.body_id) {
            return range("body", why);
        }
        if let Some(r) = &self.reason {
            if let Err(why) = check_word(r) {
                return range("reason", why);
            }
        }
        if let PageHealth::Damaged(d) = &self.page {
            if let Err(why) = check_word(d) {
                return range("page", why);
            }
        }
        if self.flags.len() > MAX_FLAGS {
            return range(
                "flags",
                format!("{} names, at most {MAX_FLAGS}", self.flags.len()),
            );
        }
        for f in &self.flags {
            if let Err(why) = check_word(f) {
                return range("flags", why);
            }
        }
        if let Some(s) = self.max_stiffness {
            if let Err(why) = check_unit(s) {
                return range("max_stiffness", why);
            }
        }
        if let Some(l) = self.lateness_ms {
            if !(0.0..=MAX_LATENESS_MS).contains(&l) {
                return range(
                    "lateness_ms",
                    format!("{l} is not within 0..={MAX_LATENESS_MS}"),
                );
            }
        }
        if let Some(b) = self.battery {
            if let Err(why) = check_unit(b) {
                return range("battery", why);
            }
        }
        if let Some(h) = &self.hottest {
            if joint_index(&h.joint).is_none() {
                return range(
                    "hottest.joint",
                    format!("{:?} is not a joint name", clip(&h.joint)),
                );
            }
            if let Err(why) = check_temperature(h.degc) {
                return range("hottest.degc", why);
            }
        }
        if let Some(s) = &self.stiffness {
            for (i, &v) in s.iter().enumerate() {
                if let Err(why) = check_unit(v) {
                    return range(&format!("stiffness[{i}]"), why);
                }
            }
        }
        if let Some(t) = &self.temperature {
            for (i, &v) in t.iter().enumerate() {
                if let Err(why) = check_temperature(v) {
                    return range(&format!("temperature[{i}]"), why);
                }
            }
        }
        Ok(())
    }

    /// A copy with every field in range, as [`encode`] sends it: names
    /// cut to their length at a character boundary, characters a name may
    /// not have replaced (`?` in the name, `_` in the body id and words),
    /// flags beyond 8 dropped, unknown hottest joints dropped, numbers
    /// clamped and rounded (stiffness and battery to 0.001, a stiffness
    /// above 0 never to 0; lateness to 0.01 ms; NaN stiffness becomes 1,
    /// the worst case; NaN battery or lateness becomes `None`).
    pub fn sanitized(&self) -> Beacon {
        let mut b = self.clone();
        b.name = fix_string(&b.name, MAX_NAME, "?", is_name_char, '?');
        b.body_id = fix_string(&b.body_id, MAX_NAME, "unknown", is_id_char, '_');
        b.reason = b.reason.map(|r| fix_word(&r));
        if let PageHealth::Damaged(d) = &b.page {
            b.page = PageHealth::Damaged(fix_word(d));
        }
        b.flags.truncate(MAX_FLAGS);
        for f in &mut b.flags {
            *f = fix_word(f);
        }
        b.max_stiffness = b.max_stiffness.map(fix_stiffness);
        b.lateness_ms = b
            .lateness_ms
            .and_then(|l| (!l.is_nan()).then(|| round_to(l.clamp(0.0, MAX_LATENESS_MS), 100.0)));
        b.battery = b
            .battery
            .and_then(|x| (!x.is_nan()).then(|| round_to(x.clamp(0.0, 1.0), 1000.0)));
        if let Some(h) = &mut b.hottest {
            h.degc = h.degc.clamp(TEMPERATURE_RANGE.0, TEMPERATURE_RANGE.1);
        }
        if b.hottest
            .as_ref()
            .is_some_and(|h| joint_index(&h.joint).is_none())
        {
            b.hottest = None;
        }
        if let Some(s) = &mut b.stiffness {
            for v in s.iter_mut() {
                *v = fix_stiffness(*v);
            }
        }
        if let Some(t) = &mut b.temperature {
            for v in t.iter_mut() {
                *v = (*v).clamp(TEMPERATURE_RANGE.0, TEMPERATURE_RANGE.1);
            }
        }
        b
    }

    /// Armed, re-armed by a person, limp until woken, and the robot has a
    /// key: the only state in which the app offers WAKE.
    pub fn wakeable(&self) -> bool {
        self.switch == SwitchPosition::Armed
            && self.motion == Motion::LimpWaitingForWake
            && self.net_wake
            && self.wake_generation.is_some()
            && self.page == PageHealth::Ok
    }
}

/// The joint index (`nao_wire::Joint`) of the joint called `name`.
pub fn joint_index(name: &str) -> Option<usize> {
    nao_wire::Joint::ALL.iter().position(|j| j.name() == name)
}

/// Every joint's LoLA name, in joint order.
pub fn joint_names() -> [&'static str; JOINTS] {
    nao_wire::Joint::ALL.map(|j| j.name())
}

fn clip(s: &str) -> String {
    s.chars().take(48).collect()
}

fn is_name_char(c: char) -> bool {
    !c.is_control() && c != '"' && c != '\\'
}

/// A body id's or a word's (reason, damage, flag) character.
fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// `s` is 1..=`max` bytes, every character one `keep` allows; else why
/// not, the characters allowed told as `allowed`.
fn check_chars(s: &str, max: usize, keep: fn(char) -> bool, allowed: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("empty".into());
    }
    if s.len() > max {
        return Err(format!("{} bytes, at most {max}", s.len()));
    }
    match s.chars().find(|&c| !keep(c)) {
        Some(c) => Err(format!("character {c:?} in {:?}; {allowed}", clip(s))),
        None => Ok(()),
    }
}

fn check_name(s: &str) -> Result<(), String> {
    let allowed = "a name has no control characters, '\"' or '\\'";
    check_chars(s, MAX_NAME, is_name_char, allowed)
}

fn check_body_id(s: &str) -> Result<(), String> {
    check_chars(
        s,
        MAX_NAME,
        is_id_char,
        "a body id has only A-Z a-z 0-9 . _ : -",
    )
}

fn check_word(s: &str) -> Result<(), String> {
    check_chars(
        s,
        MAX_WORD,
        is_id_char,
        "a name has only A-Z a-z 0-9 . _ : -",
    )
}

fn check_unit(x: f32) -> Result<(), String> {
    if (0.0..=1.0).contains(&x) {
        Ok(())
    } else {
        Err(format!("{x} is not within 0..=1"))
    }
}

fn check_temperature(t: i16) -> Result<(), String> {
    let (lo, hi) = TEMPERATURE_RANGE;
    if (lo..=hi).contains(&t) {
        Ok(())
    } else {
        Err(format!("{t} degC is not within {lo}..={hi}"))
    }
}

/// `s` with characters failing `keep` replaced by `with`, cut to `max`
/// bytes at a character boundary; `empty` when nothing is left.
fn fix_string(s: &str, max: usize, empty: &str, keep: fn(char) -> bool, with: char) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = if keep(c) { c } else { with };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        empty.to_string()
    } else {
        out
    }
}

fn fix_word(s: &str) -> String {
    fix_string(s, MAX_WORD, "unknown", is_id_char, '_')
}

/// `x` rounded to `1 / per_unit`, through f64 so that rounding again
/// changes nothing (as long as `x * per_unit` < 2^23); never -0.
fn round_to(x: f32, per_unit: f64) -> f32 {
    ((f64::from(x) * per_unit).round() / per_unit) as f32 + 0.0
}

fn fix_stiffness(x: f32) -> f32 {
    if x.is_nan() {
        return 1.0;
    }
    let r = round_to(x.clamp(0.0, 1.0), 1000.0);
    if r == 0.0 && x > 0.0 {
        0.001
    } else {
        r
    }
}

mod motion_name {
    //! [`super::Motion`] in JSON: its name.
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &super::Motion, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Motion, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::Motion::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown motion {name:?}")))
    }
}

/// A `u64` as 16 lower-case hex digits in JSON.
mod hex_u64 {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        crate::parse_hex_u64(&s).ok_or_else(|| {
            D::Error::custom(format!(
                "nonce {:?} is not 16 hex digits",
                s.chars().take(24).collect::<String>()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample;
    use proptest::prelude::*;

    /// The largest beacon the encoder can write: every name at its limit
    /// in 2-byte characters where allowed, every number at its widest.
    fn widest() -> Beacon {
        let word = "x".repeat(MAX_WORD);
        Beacon {
            seq: u64::MAX,
            name: "\u{e9}".repeat(MAX_NAME / 2),
            body_id: "B".repeat(MAX_NAME),
            switch: SwitchPosition::Tripped,
            reason: Some(word.clone()),
            since: Some(u64::MAX),
            trip_count: u64::MAX,
            wake_generation: Some(u64::MAX),
            nonce: u64::MAX,
            page: PageHealth::Damaged(word.clone()),
            heartbeat_age_ms: Some(u64::MAX),
            guard: Guard {
                pid: Some(u32::MAX),
                alive: false,
                holding: false,
            },
            motion: Motion::LimpWaitingForWake,
            flags: vec![word; MAX_FLAGS],
            max_stiffness: Some(0.123),
            lateness_ms: Some(59_999.99),
            battery: Some(0.123),
            hottest: Some(Hottest {
                joint: "RShoulderPitch".into(),
                degc: -59,
            }),
            stiffness: Some([0.123; JOINTS]),
            temperature: Some([-59; JOINTS]),
            net_wake: false,
        }
    }

    #[test]
    fn a_beacon_round_trips_and_starts_with_its_versioned_prefix() {
        let b = sample();
        let d = encode(&b);
        assert!(d.starts_with(b"NAO-RS BEACON 1\n{"), "{d:?}");
        assert_eq!(decode(&d).unwrap(), b);
        let text = String::from_utf8(d).unwrap();
        assert!(text.contains("\"nonce\":\"1f2e3d4c5b6a7988\""), "{text}");
        assert!(text.contains("\"motion\":\"awake\""), "{text}");
        assert!(text.contains("\"switch\":\"armed\""), "{text}");
        assert!(text.contains("\"page\":\"ok\""), "{text}");
    }

    #[test]
    fn the_widest_beacon_fits_in_1200_bytes() {
        let d = encode(&widest());
        assert!(d.len() <= MAX_ENCODED, "{} bytes", d.len());
        assert!(decode(&d).is_ok());
        // The sizes docs/app.md gives: the widest, and the example.
        assert_eq!(d.len(), 1188);
        assert_eq!(encode(&sample()).len(), 628);
        // Sealed (a team key on the robot): still one datagram a reader
        // takes, well within 1,472 bytes.
        let k = crate::auth::TeamKey::from_bytes(&[1; 32]).unwrap();
        let sealed = crate::auth::seal_beacon(&k, u64::MAX, &d);
        assert_eq!(sealed.len(), 1188 + crate::auth::SEAL_LEN);
        assert!(sealed.len() <= MAX_DATAGRAM);
        assert_eq!(decode(&sealed).unwrap(), decode(&d).unwrap());
        assert!(crate::auth::open_beacon(&k, &sealed).is_ok());
    }

    #[test]
    fn wrong_prefix_version_size_json_and_range_are_told_apart() {
        let kind = |d: &[u8]| decode(d).unwrap_err().kind();
        assert_eq!(kind(b""), DecodeErrorKind::Prefix);
        assert_eq!(kind(b"NAO-RS STOP"), DecodeErrorKind::Prefix);
        assert_eq!(kind(b"nao-rs beacon 1\n{}"), DecodeErrorKind::Prefix);
        assert_eq!(kind(b"NAO-RS BEACON 2\n{}"), DecodeErrorKind::Version);
        assert_eq!(kind(b"NAO-RS BEACON 1"), DecodeErrorKind::Version);
        assert_eq!(kind(b"NAO-RS BEACON 1\n"), DecodeErrorKind::Json);
        assert_eq!(kind(b"NAO-RS BEACON 1\n{}"), DecodeErrorKind::Json);
        let mut big = encode(&sample());
        big.resize(MAX_DATAGRAM + 1, b' ');
        assert_eq!(kind(&big), DecodeErrorKind::Oversized);
        // Trailing spaces within the limit are JSON whitespace.
        big.truncate(MAX_DATAGRAM);
        assert!(decode(&big).is_ok());
        let e = decode(b"NAO-RS BEACON 7\n{}").unwrap_err();
        assert!(e.to_string().contains("version \"7\""), "{e}");
    }

    fn with(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let d = encode(&sample());
        let mut v: serde_json::Value = serde_json::from_slice(&d[PREFIX.len()..]).unwrap();
        f(&mut v);
        let mut out = PREFIX.to_vec();
        out.extend(serde_json::to_vec(&v).unwrap());
        out
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (with(|v| v["battery"] = 1.5.into()), "battery"),
            (with(|v| v["battery"] = (-0.1).into()), "battery"),
            (with(|v| v["max_stiffness"] = 1e39.into()), "max_stiffness"),
            (with(|v| v["stiffness"][7] = 2.into()), "stiffness[7]"),
            (with(|v| v["temperature"][3] = 999.into()), "temperature[3]"),
            (with(|v| v["lateness_ms"] = (-1).into()), "lateness_ms"),
            (with(|v| v["name"] = "".into()), "name"),
            (with(|v| v["name"] = "a\u{7}b".into()), "name"),
            (with(|v| v["name"] = "n".repeat(33).into()), "name"),
            (with(|v| v["body"] = "a b".into()), "body"),
            (with(|v| v["body"] = "<script>".into()), "body"),
            (with(|v| v["reason"] = "x y".into()), "reason"),
            (with(|v| v["page"] = "".into()), "page"),
            (with(|v| v["flags"] = vec!["a"; 9].into()), "flags"),
            (with(|v| v["name"] = "a\"b".into()), "name"),
            (
                with(|v| v["hottest"]["joint"] = "LToe".into()),
                "hottest.joint",
            ),
        ];
        for (d, field) in cases {
            let e = decode(&d).unwrap_err();
            assert_eq!(e.kind(), DecodeErrorKind::Range, "{field}: {e}");
            assert!(e.detail().starts_with(field), "{field}: {e}");
        }
    }

    #[test]
    fn malformed_json_fields_are_json_errors() {
        let cases = [
            with(|v| v["nonce"] = "12".into()),
            with(|v| v["nonce"] = "zz2e3d4c5b6a7988".into()),
            with(|v| v["nonce"] = 5.into()),
            with(|v| v["stiffness"] = vec![0.5; 24].into()),
            with(|v| v["stiffness"][0] = serde_json::Value::Null),
            with(|v| v["switch"] = "half".into()),
            with(|v| v["motion"] = "dancing".into()),
            with(|v| v["seq"] = (-1).into()),
            with(|v| v["temperature"][0] = 40000.into()),
            with(|v| {
                v.as_object_mut().unwrap().remove("guard");
            }),
        ];
        for d in cases {
            let e = decode(&d).unwrap_err();
            assert_eq!(e.kind(), DecodeErrorKind::Json, "{e}");
        }
        let mut d = encode(&sample());
        d.extend_from_slice(b"{}");
        assert_eq!(decode(&d).unwrap_err().kind(), DecodeErrorKind::Json);
    }

    #[test]
    fn unknown_fields_are_ignored_within_a_version() {
        let d = with(|v| v["added_later"] = 1.into());
        assert_eq!(decode(&d).unwrap(), sample());
    }

    #[test]
    fn nan_and_out_of_range_inputs_are_sanitized_by_encode() {
        let mut b = sample();
        b.name = "bad\nname-that-is-far-too-long-for-a-beacon".into();
        b.body_id = "P 00\u{e9}".into();
        b.battery = Some(f32::NAN);
        b.lateness_ms = Some(f32::INFINITY);
        b.max_stiffness = Some(f32::NAN);
        b.stiffness = Some([f32::NAN; JOINTS]);
        b.stiffness.as_mut().unwrap()[1] = 0.0001;
        b.stiffness.as_mut().unwrap()[2] = -3.0;
        b.temperature = Some([i16::MAX; JOINTS]);
        b.hottest = Some(Hottest {
            joint: "Tail".into(),
            degc: 1,
        });
        b.flags = vec!["has space".into(); 20];
        b.reason = Some(String::new());
        let got = decode(&encode(&b)).unwrap();
        assert_eq!(got.name, "bad?name-that-is-far-too-long-fo");
        assert_eq!(got.body_id, "P_00_");
        assert_eq!(got.battery, None);
        assert_eq!(got.lateness_ms, Some(MAX_LATENESS_MS));
        assert_eq!(got.max_stiffness, Some(1.0));
        let s = got.stiffness.unwrap();
        assert_eq!((s[0], s[1], s[2]), (1.0, 0.001, 0.0));
        assert_eq!(got.temperature.unwrap()[0], TEMPERATURE_RANGE.1);
        assert_eq!(got.hottest, None);
        assert_eq!(got.flags, vec!["has_space"; MAX_FLAGS]);
        assert_eq!(got.reason.as_deref(), Some("unknown"));
    }

    #[test]
    fn motion_names_are_the_page_layout_3_names() {
        let names: Vec<_> = Motion::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(
            names,
            [
                "none",
                "limp-tripped",
                "limp-waiting-for-wake",
                "awake",
                "bring-up"
            ]
        );
        for m in Motion::ALL {
            assert_eq!(Motion::from_name(m.name()), Some(m));
            let mut b = sample();
            b.motion = m;
            let json = String::from_utf8(encode(&b)).unwrap();
            assert!(
                json.contains(&format!("\"motion\":\"{}\"", m.name())),
                "{json}"
            );
            assert_eq!(decode(json.as_bytes()).unwrap().motion, m);
        }
        assert_eq!(Motion::from_name("Awake"), None);
    }

    #[test]
    fn wakeable_needs_armed_limp_waiting_key_and_a_sound_page() {
        let mut b = sample();
        assert!(!b.wakeable(), "awake is not wakeable");
        b.motion = Motion::LimpWaitingForWake;
        assert!(b.wakeable());
        b.net_wake = false;
        assert!(!b.wakeable());
        b.net_wake = true;
        b.page = PageHealth::Damaged("no-magic".into());
        assert!(!b.wakeable());
        b.page = PageHealth::Ok;
        b.switch = SwitchPosition::Tripped;
        b.wake_generation = None;
        assert!(!b.wakeable());
    }

    #[test]
    fn joint_names_are_nao_wire_s() {
        let n = joint_names();
        assert_eq!(n.len(), 25);
        assert_eq!(n[0], "HeadYaw");
        assert_eq!(n[24], "RHand");
        assert_eq!(joint_index("LKneePitch"), Some(10));
        assert_eq!(joint_index("lkneepitch"), None);
    }

    // ---- property tests: any input, no panic; round trips ----

    fn any_f32() -> impl Strategy<Value = f32> {
        prop_oneof![
            (0.0f32..=1.0),
            any::<f32>(),
            Just(f32::NAN),
            Just(f32::INFINITY),
            Just(-0.0f32),
        ]
    }

    fn any_string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_.:-]{1,32}",
            ".{0,60}",
            "\\PC{0,50}",
            Just(String::new()),
        ]
    }

    prop_compose! {
        fn any_beacon()(
            (seq, trip_count, since, nonce, hb) in (any::<u64>(), any::<u64>(), any::<Option<u64>>(), any::<u64>(), any::<Option<u64>>()),
            (name, body_id, reason, page) in (any_string(), any_string(), proptest::option::of(any_string()), proptest::option::of(any_string())),
            (armed, motion, pid, alive, holding, net_wake) in (any::<bool>(), 0usize..5, any::<Option<u32>>(), any::<bool>(), any::<bool>(), any::<bool>()),
            flags in proptest::collection::vec(any_string(), 0..20),
            (max_stiffness, lateness_ms, battery) in (proptest::option::of(any_f32()), proptest::option::of(any_f32()), proptest::option::of(any_f32())),
            hottest in proptest::option::of((prop_oneof![Just("LHand".to_string()), any_string()], any::<i16>())),
            stiffness in proptest::option::of(proptest::array::uniform25(any_f32())),
            temperature in proptest::option::of(proptest::array::uniform25(any::<i16>())),
        ) -> Beacon {
            Beacon {
                seq, name, body_id,
                switch: if armed { SwitchPosition::Armed } else { SwitchPosition::Tripped },
                reason, since, trip_count,
                wake_generation: armed.then_some(trip_count),
                nonce,
                page: page.map_or(PageHealth::Ok, PageHealth::from),
                heartbeat_age_ms: hb,
                guard: Guard { pid, alive, holding },
                motion: Motion::ALL[motion],
                flags, max_stiffness, lateness_ms, battery,
                hottest: hottest.map(|(joint, degc)| Hottest { joint, degc }),
                stiffness, temperature, net_wake,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn any_beacon_encodes_within_1200_bytes_and_decodes_to_its_sanitized_self(b in any_beacon()) {
            let d = encode(&b);
            prop_assert!(d.len() <= MAX_ENCODED, "{} bytes", d.len());
            let got = decode(&d).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&got, &b.sanitized());
            // Sanitizing is idempotent: a decoded beacon re-encodes byte for byte.
            prop_assert_eq!(encode(&got), d);
        }

        #[test]
        fn garbage_never_panics(d in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = decode(&d);
        }

        #[test]
        fn garbage_after_the_prefix_never_panics_and_is_refused(tail in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let mut d = PREFIX.to_vec();
            d.extend(tail);
            prop_assert!(decode(&d).is_err());
        }

        #[test]
        fn truncated_beacons_are_refused(b in any_beacon(), cut in 0usize..2000) {
            let d = encode(&b);
            let cut = cut % d.len();
            prop_assert!(decode(&d[..cut]).is_err());
        }

        #[test]
        fn flipped_bytes_never_panic_and_what_decodes_is_in_range(b in any_beacon(), at in any::<usize>(), byte in any::<u8>()) {
            let mut d = encode(&b);
            let i = at % d.len();
            d[i] = byte;
            if let Ok(got) = decode(&d) {
                prop_assert!(got.check().is_ok());
            }
        }

        #[test]
        fn spoofed_json_values_are_refused_or_in_range(key in prop_oneof![
            Just("seq"), Just("name"), Just("body"), Just("battery"), Just("stiffness"),
            Just("temperature"), Just("hottest"), Just("flags"), Just("nonce"), Just("guard"),
            Just("lateness_ms"), Just("since"), Just("page"), Just("motion"),
        ], value in prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            any_string().prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            Just(serde_json::json!([1, 2, 3])),
            Just(serde_json::json!({"joint": "LHand", "degc": 1e9})),
            Just(serde_json::json!({"pid": -1, "alive": true, "holding": true})),
        ]) {
            let d = with(|v| v[key] = value);
            if let Ok(got) = decode(&d) {
                prop_assert!(got.check().is_ok());
            }
        }
    }
}
