//! The network wake (`docs/app.md` "The wake datagram"): the operator's
//! app asks a re-armed, limp robot to move again by one UDP datagram to
//! port [`PORT`], authenticated with the team key.
//!
//! A datagram is the 14 ASCII bytes [`PREFIX`] (`NAO-RS WAKE 1\n`) and one
//! compact JSON object:
//! `{"body":"P0000074A05S94700082","key":"3f2a9c01","generation":7,"nonce":"1f2e3d4c5b6a7988","mac":"<64 hex digits>"}`.
//! The MAC is HMAC-SHA256 under the team key over [`mac_input`]: a domain
//! tag, the body id (length-prefixed), the page's nonce and the wake
//! generation. The robot accepts a wake only for its own body id, its
//! page's current nonce and the generation the page is armed at now, so
//! a recorded wake is useless after the next trip (the generation moves
//! on), a reboot or a page repair (a new nonce).
//!
//! The same key seals every beacon a robot sends ([`seal_beacon`],
//! [`open_beacon`]; `docs/app.md` "The beacon's seal"): the app shows only
//! beacons that verify and signs a wake only from one of them.

use std::path::Path;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The UDP port the robot's beacon service takes wakes on.
pub const PORT: u16 = 7703;

/// Every wake datagram of this version starts with these 14 ASCII bytes.
pub const PREFIX: &[u8; 14] = b"NAO-RS WAKE 1\n";

/// [`WakeDatagram::decode`] refuses longer datagrams unread.
pub const MAX_DATAGRAM: usize = 512;

/// The first bytes of the MAC's input: the purpose and version, so the
/// team key's MACs for anything else can never be taken for a wake.
pub const DOMAIN: &[u8; 16] = b"nao-rs wake v1\0\0";

/// The shortest and longest team key file, in bytes.
pub const KEY_LEN: std::ops::RangeInclusive<usize> = 32..=1024;

/// The team key's default path on a robot.
pub const ROBOT_KEY_PATH: &str = "/etc/nao-rs/team.key";

type HmacSha256 = Hmac<Sha256>;

/// The team key: the bytes of the key file (32..=1024). Its `Debug` shows
/// only its id.
#[derive(Clone)]
pub struct TeamKey {
    bytes: Vec<u8>,
    id: String,
}

impl std::fmt::Debug for TeamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TeamKey {{ id: {} }}", self.id)
    }
}

/// What is wrong with a key file, as a value to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyErrorKind {
    /// It cannot be opened or read (missing, no permission).
    Unreadable,
    /// It is not a regular file.
    NotAFile,
    /// Group or others may read or write it.
    Mode,
    /// Shorter than 32 or longer than 1,024 bytes.
    Size,
}

/// Why a team key was refused; the message names the path, what is wrong
/// and the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    kind: KeyErrorKind,
    detail: String,
}

impl KeyError {
    /// What kind of wrong.
    pub fn kind(&self) -> KeyErrorKind {
        self.kind
    }
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for KeyError {}

fn make_one(path: &str) -> String {
    format!("make one with `(umask 077 && head -c 32 /dev/urandom > {path})` and copy the same file to every robot and laptop of the team")
}

impl TeamKey {
    /// A key of these bytes (32..=1024 of them).
    pub fn from_bytes(bytes: &[u8]) -> Result<TeamKey, KeyError> {
        if !KEY_LEN.contains(&bytes.len()) {
            return Err(KeyError {
                kind: KeyErrorKind::Size,
                detail: format!("a team key is 32..=1024 bytes, this one is {}", bytes.len()),
            });
        }
        Ok(TeamKey {
            bytes: bytes.to_vec(),
            id: key_id(bytes),
        })
    }

    /// Reads the key file at `path`: a regular file of 32..=1024 bytes
    /// that only its owner may read or write (mode 0600 or stricter). The
    /// mode and size are judged on the opened file, not on the path. The
    /// file is opened without blocking (`O_NONBLOCK`): a FIFO or a device
    /// put at the path is refused as [`KeyErrorKind::NotAFile`] at once,
    /// it never hangs the reader; at most 1,025 bytes are read.
    pub fn read(path: &Path) -> Result<TeamKey, KeyError> {
        use std::io::Read;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let p = path.display().to_string();
        let unreadable = |e: std::io::Error| KeyError {
            kind: KeyErrorKind::Unreadable,
            detail: format!("cannot read the team key {p}: {e}; {}", make_one(&p)),
        };
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(path)
            .map_err(unreadable)?;
        let meta = f.metadata().map_err(unreadable)?;
        check_key_file(&p, meta.is_file(), meta.permissions().mode(), meta.len())?;
        let mut bytes = Vec::with_capacity(64);
        f.by_ref()
            .take(*KEY_LEN.end() as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        check_key_file(&p, true, 0o600, bytes.len() as u64)?;
        TeamKey::from_bytes(&bytes)
    }

    /// The key's id: the first 8 hex digits of the SHA-256 of the key
    /// file (`sha256sum team.key | cut -c1-8`). It names the key in logs
    /// and datagrams; it tells nothing usable about the key.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The key id of key bytes `key`: 8 lower-case hex digits.
pub fn key_id(key: &[u8]) -> String {
    let d = Sha256::digest(key);
    hex(&d[..4])
}

/// The key file rules as a pure function: `path` is only for the message.
pub fn check_key_file(path: &str, is_file: bool, mode: u32, len: u64) -> Result<(), KeyError> {
    if !is_file {
        return Err(KeyError {
            kind: KeyErrorKind::NotAFile,
            detail: format!(
                "the team key {path} is not a regular file; {}",
                make_one(path)
            ),
        });
    }
    if mode & 0o077 != 0 {
        return Err(KeyError {
            kind: KeyErrorKind::Mode,
            detail: format!(
                "the team key {path} has mode {:04o}: group or others may read it; \
                 fix: `chmod 600 {path}`",
                mode & 0o7777
            ),
        });
    }
    if !KEY_LEN.contains(&usize::try_from(len).unwrap_or(usize::MAX)) {
        return Err(KeyError {
            kind: KeyErrorKind::Size,
            detail: format!(
                "the team key {path} is {len} bytes, a key is 32..=1024 bytes; {}",
                make_one(path)
            ),
        });
    }
    Ok(())
}

/// The bytes the MAC covers, in order:
///
/// | bytes | what |
/// |---|---|
/// | 16 | [`DOMAIN`], `nao-rs wake v1` and two NUL bytes |
/// | 4 | the body id's length in bytes, big-endian |
/// | n | the body id, UTF-8 |
/// | 8 | the page's nonce, big-endian |
/// | 8 | the wake generation, big-endian |
pub fn mac_input(body_id: &str, nonce: u64, generation: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + 4 + body_id.len() + 16);
    m.extend_from_slice(DOMAIN);
    m.extend_from_slice(&(body_id.len() as u32).to_be_bytes());
    m.extend_from_slice(body_id.as_bytes());
    m.extend_from_slice(&nonce.to_be_bytes());
    m.extend_from_slice(&generation.to_be_bytes());
    m
}

fn mac(key: &TeamKey) -> HmacSha256 {
    // HMAC takes a key of any length: this cannot fail.
    match HmacSha256::new_from_slice(&key.bytes) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

/// A wake datagram, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeDatagram {
    /// The body id of the robot to wake.
    pub body_id: String,
    /// The id of the key it was signed with ([`TeamKey::id`]).
    pub key_id: String,
    /// The wake generation the app saw in the robot's beacon.
    pub generation: u64,
    /// The page nonce the app saw in the robot's beacon.
    pub nonce: u64,
    /// HMAC-SHA256 over [`mac_input`].
    pub mac: [u8; 32],
}

#[derive(Serialize, Deserialize)]
struct Wire {
    body: String,
    key: String,
    generation: u64,
    nonce: String,
    mac: String,
}

/// The signed wake for robot `body_id` whose beacon reported page nonce
/// `nonce` and wake generation `generation`.
pub fn sign(key: &TeamKey, body_id: &str, nonce: u64, generation: u64) -> WakeDatagram {
    let mut m = mac(key);
    m.update(&mac_input(body_id, nonce, generation));
    WakeDatagram {
        body_id: body_id.to_string(),
        key_id: key.id.clone(),
        generation,
        nonce,
        mac: m.finalize().into_bytes().into(),
    }
}

/// Why a robot refused a wake, as a value to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeRefusalKind {
    /// Not a wake datagram of this version (prefix, JSON, field, size).
    Malformed,
    /// For another robot.
    OtherBody,
    /// Signed with another key (or none: this robot has no key).
    WrongKeyId,
    /// The MAC does not verify: forged or altered.
    BadMac,
    /// For another page: the robot rebooted or its page was repaired
    /// since the beacon the app saw.
    OtherNonce,
    /// For another armed epoch: tripped (and maybe re-armed) since.
    StaleGeneration,
    /// The page is not armed: a person must re-arm on the robot first.
    NotArmed,
}

impl crate::RefusalKind for WakeRefusalKind {
    const WHAT: &'static str = "wake refused";

    fn name(self) -> &'static str {
        match self {
            WakeRefusalKind::Malformed => "malformed",
            WakeRefusalKind::OtherBody => "other-body",
            WakeRefusalKind::WrongKeyId => "wrong-key-id",
            WakeRefusalKind::BadMac => "bad-mac",
            WakeRefusalKind::OtherNonce => "other-nonce",
            WakeRefusalKind::StaleGeneration => "stale-generation",
            WakeRefusalKind::NotArmed => "not-armed",
        }
    }
}

/// A refused wake: its kind and a sentence for the robot's log; shown as
/// `wake refused (<kind>): <sentence>`.
pub type WakeRefusal = crate::Refusal<WakeRefusalKind>;

use nao_kit::hex::{hex, unhex32};

fn is_key_id(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl WakeDatagram {
    /// The datagram's bytes: [`PREFIX`] and compact JSON.
    pub fn encode(&self) -> Vec<u8> {
        let w = Wire {
            body: self.body_id.clone(),
            key: self.key_id.clone(),
            generation: self.generation,
            nonce: format!("{:016x}", self.nonce),
            mac: hex(&self.mac),
        };
        let mut out = PREFIX.to_vec();
        // Cannot fail: strings and integers only.
        let _ = serde_json::to_writer(&mut out, &w);
        out
    }

    /// The wake in `datagram`; any bytes, no panic. Refusals are
    /// [`WakeRefusalKind::Malformed`].
    pub fn decode(datagram: &[u8]) -> Result<WakeDatagram, WakeRefusal> {
        let bad = |d: String| Err(WakeRefusal::new(WakeRefusalKind::Malformed, d));
        if datagram.len() > MAX_DATAGRAM {
            return bad(format!(
                "{} bytes, a wake has at most {MAX_DATAGRAM}",
                datagram.len()
            ));
        }
        let Some(json) = datagram.strip_prefix(PREFIX.as_slice()) else {
            return bad("does not start with \"NAO-RS WAKE 1\\n\"".into());
        };
        let w: Wire = match serde_json::from_slice(json) {
            Ok(w) => w,
            Err(e) => return bad(e.to_string()),
        };
        if w.body.is_empty() || w.body.len() > crate::format::MAX_NAME {
            return bad(format!("body id of {} bytes", w.body.len()));
        }
        if !is_key_id(&w.key) {
            return bad("key id is not 8 lower-case hex digits".into());
        }
        let Some(nonce) = crate::parse_hex_u64(&w.nonce) else {
            return bad("nonce is not 16 hex digits".into());
        };
        let Some(mac) = unhex32(&w.mac) else {
            return bad("mac is not 64 hex digits".into());
        };
        Ok(WakeDatagram {
            body_id: w.body,
            key_id: w.key,
            generation: w.generation,
            nonce,
            mac,
        })
    }
}

/// Whether robot `expected_body_id`, holding `key` (or none), whose page
/// has nonce `page_nonce` and is armed at `page_generation`
/// (`Snapshot::wake_generation()`: `None` while tripped), may be woken by
/// `d`. Checked in this order: body, key id, MAC (compared in constant
/// time), nonce, generation, armed; so a stale or foreign-page refusal is
/// only ever told of an authentic wake.
pub fn verify(
    key: Option<&TeamKey>,
    d: &WakeDatagram,
    expected_body_id: &str,
    page_nonce: u64,
    page_generation: Option<u64>,
) -> Result<(), WakeRefusal> {
    use WakeRefusalKind as K;
    let refuse = |kind, detail: String| Err(WakeRefusal::new(kind, detail));
    if d.body_id != expected_body_id {
        let body = &d.body_id;
        return refuse(
            K::OtherBody,
            format!("for body {body:?}, this robot is {expected_body_id:?}"),
        );
    }
    let Some(key) = key else {
        return refuse(
            K::WrongKeyId,
            format!(
                "signed with key {}, this robot has no team key ({ROBOT_KEY_PATH}): network wake is off",
                d.key_id
            ),
        );
    };
    if d.key_id != key.id {
        let (theirs, ours) = (&d.key_id, &key.id);
        return refuse(
            K::WrongKeyId,
            format!("signed with key {theirs}, this robot's key is {ours}"),
        );
    }
    let mut m = mac(key);
    m.update(&mac_input(&d.body_id, d.nonce, d.generation));
    if m.verify_slice(&d.mac).is_err() {
        let id = &key.id;
        return refuse(
            K::BadMac,
            format!("the MAC does not verify under key {id}: forged or altered"),
        );
    }
    if d.nonce != page_nonce {
        return refuse(
            K::OtherNonce,
            format!(
                "for page nonce {:016x}, the page is {page_nonce:016x} now (rebooted or repaired since)",
                d.nonce
            ),
        );
    }
    match page_generation {
        None => refuse(
            K::NotArmed,
            "the switch is tripped: a person re-arms on the robot first".into(),
        ),
        Some(g) if g != d.generation => refuse(
            K::StaleGeneration,
            format!(
                "for generation {}, the page is armed at generation {g} (tripped since)",
                d.generation
            ),
        ),
        Some(_) => Ok(()),
    }
}

// ---- the beacon's seal (docs/app.md "The beacon's seal") ----

/// The first bytes of a beacon MAC's input: the purpose and version, so a
/// beacon's MAC is never a wake's and the other way round.
pub const BEACON_DOMAIN: &[u8; 16] = b"nao-rs beacon v1";

/// The seal's last bytes: `,"mac":"`, 64 hex digits, `"}`.
const MAC_TAIL: usize = 8 + 64 + 2;

/// What [`seal_beacon`] adds to an encoded beacon: `,"key":"<8 hex>"`,
/// `,"start":"<16 hex>"` and the MAC's tail, in place of its `}`: 117
/// bytes.
pub const SEAL_LEN: usize = 17 + 27 + MAC_TAIL - 1;

/// A verified beacon's seal: the key that signed it and the beacon
/// service's start nonce (random, new at every start of the service).
/// The beacon's `seq` counts from 0 within one start: (start, seq) never
/// repeats, so a reader keeps the newest `seq` per start and takes only
/// newer ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeaconSeal {
    /// The id of the key that signed it.
    pub key_id: String,
    /// The beacon service's start nonce.
    pub start: u64,
}

/// Why a beacon did not verify, as a value to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BeaconRefusalKind {
    /// No seal: the robot has no team key (or is of an older version).
    Unsealed,
    /// A seal that is not one: key, start or MAC not as documented.
    Malformed,
    /// Sealed with another key.
    WrongKeyId,
    /// The MAC does not verify: forged or altered.
    BadMac,
}

impl crate::RefusalKind for BeaconRefusalKind {
    const WHAT: &'static str = "beacon not verified";

    fn name(self) -> &'static str {
        match self {
            BeaconRefusalKind::Unsealed => "unsealed",
            BeaconRefusalKind::Malformed => "malformed",
            BeaconRefusalKind::WrongKeyId => "wrong-key-id",
            BeaconRefusalKind::BadMac => "bad-mac",
        }
    }
}

/// A beacon that did not verify: its kind and a sentence.
pub type BeaconRefusal = crate::Refusal<BeaconRefusalKind>;

/// The beacon datagram `encoded` ([`crate::format::encode`]) sealed with
/// `key` for the service's start nonce `start`: its closing `}` replaced
/// by `,"key":"<id>","start":"<16 hex>","mac":"<64 hex>"}`, where the MAC
/// is HMAC-SHA256 under the team key over [`BEACON_DOMAIN`] and every byte
/// before `,"mac":"`. Still one JSON object: a reader without a key reads
/// the beacon and ignores the three fields. Bytes that do not end in `}`
/// (never from `encode`) are returned as they are: unsealed.
pub fn seal_beacon(key: &TeamKey, start: u64, encoded: &[u8]) -> Vec<u8> {
    let Some(body) = encoded.strip_suffix(b"}") else {
        return encoded.to_vec();
    };
    let mut out = Vec::with_capacity(encoded.len() + SEAL_LEN);
    out.extend_from_slice(body);
    out.extend_from_slice(format!(",\"key\":\"{}\",\"start\":\"{start:016x}\"", key.id).as_bytes());
    let mut m = mac(key);
    m.update(BEACON_DOMAIN);
    m.update(&out);
    let tag = hex(&m.finalize().into_bytes());
    out.extend_from_slice(b",\"mac\":\"");
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(b"\"}");
    out
}

#[derive(Deserialize)]
struct SealFields {
    key: Option<String>,
    start: Option<String>,
}

/// Whether the beacon `datagram` is sealed with `key`; any bytes, no
/// panic. Checked in this order: the MAC's tail is there (else
/// `Unsealed`), the key and start fields (`Malformed`), the key id
/// (`WrongKeyId`), the MAC in constant time (`BadMac`). Whether the
/// beacon itself decodes is [`crate::format::decode`]'s to say; whether
/// it is newer than the last one of its start is the reader's.
pub fn open_beacon(key: &TeamKey, datagram: &[u8]) -> Result<BeaconSeal, BeaconRefusal> {
    use BeaconRefusalKind as K;
    let refuse = |kind, d: String| Err(BeaconRefusal::new(kind, d));
    let n = datagram.len();
    if n > crate::format::MAX_DATAGRAM {
        return refuse(K::Malformed, format!("{n} bytes"));
    }
    let tail_ok = n >= crate::format::PREFIX.len() + MAC_TAIL
        && datagram[n - MAC_TAIL..].starts_with(b",\"mac\":\"")
        && datagram.ends_with(b"\"}");
    if !tail_ok {
        return refuse(
            K::Unsealed,
            "no MAC: the robot has no team key (or runs an older nao-rs-beacon)".into(),
        );
    }
    let Some(tag) = std::str::from_utf8(&datagram[n - 66..n - 2])
        .ok()
        .and_then(unhex32)
    else {
        return refuse(K::Malformed, "the mac is not 64 hex digits".into());
    };
    let Some(json) = datagram.strip_prefix(crate::format::PREFIX.as_slice()) else {
        return refuse(K::Malformed, "not a beacon of version 1".into());
    };
    let f: SealFields = match serde_json::from_slice(json) {
        Ok(f) => f,
        Err(e) => return refuse(K::Malformed, e.to_string()),
    };
    let (Some(key_id), Some(start)) = (f.key, f.start) else {
        return refuse(K::Malformed, "a mac without key and start".into());
    };
    let Some(start) = crate::parse_hex_u64(&start) else {
        return refuse(K::Malformed, "start is not 16 hex digits".into());
    };
    if !is_key_id(&key_id) {
        return refuse(K::Malformed, "key id is not 8 lower-case hex digits".into());
    }
    if key_id != key.id {
        let ours = &key.id;
        return refuse(
            K::WrongKeyId,
            format!("sealed with key {key_id}, the app's key is {ours}"),
        );
    }
    let mut m = mac(key);
    m.update(BEACON_DOMAIN);
    m.update(&datagram[..n - MAC_TAIL]);
    if m.verify_slice(&tag).is_err() {
        return refuse(
            K::BadMac,
            format!("the MAC does not verify under key {key_id}: forged or altered"),
        );
    }
    Ok(BeaconSeal { key_id, start })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> TeamKey {
        TeamKey::from_bytes(&[b; 32]).unwrap()
    }

    const BODY: &str = "P0000074A05S94700082";

    #[test]
    fn a_signed_wake_round_trips_and_verifies() {
        let k = key(1);
        let d = sign(&k, BODY, 0xabc, 7);
        let bytes = d.encode();
        assert!(bytes.starts_with(b"NAO-RS WAKE 1\n{\"body\":"), "{bytes:?}");
        assert!(bytes.len() < 256, "{}", bytes.len());
        let back = WakeDatagram::decode(&bytes).unwrap();
        assert_eq!(back, d);
        assert_eq!(verify(Some(&k), &back, BODY, 0xabc, Some(7)), Ok(()));
    }

    #[test]
    fn mac_input_is_domain_length_body_nonce_generation() {
        let m = mac_input("ab", 0x0102030405060708, 9);
        let mut want = b"nao-rs wake v1\0\0".to_vec();
        want.extend([0, 0, 0, 2, b'a', b'b']);
        want.extend([1, 2, 3, 4, 5, 6, 7, 8]);
        want.extend([0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(m, want);
    }

    #[test]
    fn the_mac_is_hmac_sha256_of_rfc_4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut m = HmacSha256::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn each_refusal_kind_is_told_apart() {
        let k = key(1);
        let d = sign(&k, BODY, 0xabc, 7);
        let kind = |r: Result<(), WakeRefusal>| r.unwrap_err().kind();
        use WakeRefusalKind as K;
        assert_eq!(
            kind(verify(Some(&k), &d, "other", 0xabc, Some(7))),
            K::OtherBody
        );
        assert_eq!(
            kind(verify(Some(&key(2)), &d, BODY, 0xabc, Some(7))),
            K::WrongKeyId
        );
        assert_eq!(kind(verify(None, &d, BODY, 0xabc, Some(7))), K::WrongKeyId);
        let mut forged = d.clone();
        forged.mac[0] ^= 1;
        assert_eq!(
            kind(verify(Some(&k), &forged, BODY, 0xabc, Some(7))),
            K::BadMac
        );
        // Another generation or nonce under the old MAC: the MAC fails first.
        let mut bumped = d.clone();
        bumped.generation = 8;
        assert_eq!(
            kind(verify(Some(&k), &bumped, BODY, 0xabc, Some(8))),
            K::BadMac
        );
        // A recorded wake after the next trip and re-arm: stale.
        assert_eq!(
            kind(verify(Some(&k), &d, BODY, 0xabc, Some(8))),
            K::StaleGeneration
        );
        // After a reboot or repair: another nonce.
        assert_eq!(
            kind(verify(Some(&k), &d, BODY, 0xdef, Some(7))),
            K::OtherNonce
        );
        assert_eq!(kind(verify(Some(&k), &d, BODY, 0xabc, None)), K::NotArmed);
        // A key of the same id but other bytes (forged id): bad MAC.
        let mut same_id = key(3);
        same_id.id = k.id.clone();
        assert_eq!(
            kind(verify(Some(&same_id), &d, BODY, 0xabc, Some(7))),
            K::BadMac
        );
    }

    #[test]
    fn malformed_wakes_are_refused() {
        let good = sign(&key(1), BODY, 1, 2).encode();
        let json = std::str::from_utf8(&good[PREFIX.len()..]).unwrap();
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            b"NAO-RS STOP".to_vec(),
            b"NAO-RS WAKE 2\n{}".to_vec(),
            [PREFIX.as_slice(), b"{}"].concat(),
            [
                PREFIX.as_slice(),
                json.replace("\"key\":\"", "\"key\":\"X").as_bytes(),
            ]
            .concat(),
            [
                PREFIX.as_slice(),
                json.replace("\"mac\":\"", "\"mac\":\"00").as_bytes(),
            ]
            .concat(),
            [
                PREFIX.as_slice(),
                json.replace("\"nonce\":\"", "\"nonce\":\"g").as_bytes(),
            ]
            .concat(),
            [PREFIX.as_slice(), json.replace(BODY, "").as_bytes()].concat(),
            [good.as_slice(), b" ".repeat(MAX_DATAGRAM).as_slice()].concat(),
        ];
        for c in cases {
            let e = WakeDatagram::decode(&c).unwrap_err();
            assert_eq!(e.kind(), WakeRefusalKind::Malformed, "{e}");
        }
    }

    #[test]
    fn key_id_is_the_sha256_prefix_of_the_file() {
        // sha256 of 32 zero bytes: 66687aadf862bd776c8fc18b8e9f8e20...
        assert_eq!(key_id(&[0u8; 32]), "66687aad");
        assert_eq!(key(0).id(), "66687aad");
        assert_eq!(format!("{:?}", key(0)), "TeamKey { id: 66687aad }");
    }

    #[test]
    fn key_file_rules_name_the_path_mode_and_fix() {
        let e = check_key_file("/k", true, 0o100644, 32).unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::Mode);
        let m = e.to_string();
        assert!(
            m.contains("/k") && m.contains("0644") && m.contains("chmod 600 /k"),
            "{m}"
        );
        assert!(check_key_file("/k", true, 0o100600, 32).is_ok());
        assert!(check_key_file("/k", true, 0o100400, 1024).is_ok());
        assert_eq!(
            check_key_file("/k", true, 0o100640, 32).unwrap_err().kind(),
            KeyErrorKind::Mode
        );
        let e = check_key_file("/k", true, 0o600, 31).unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::Size);
        assert!(
            e.to_string().contains("head -c 32 /dev/urandom > /k"),
            "{e}"
        );
        assert_eq!(
            check_key_file("/k", true, 0o600, 1025).unwrap_err().kind(),
            KeyErrorKind::Size
        );
        assert_eq!(
            check_key_file("/k", false, 0o600, 32).unwrap_err().kind(),
            KeyErrorKind::NotAFile
        );
    }

    #[test]
    fn key_files_are_read_with_their_mode_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("team.key");
        std::fs::write(&p, [7u8; 32]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = TeamKey::read(&p).unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::Mode);
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let k = TeamKey::read(&p).unwrap();
        assert_eq!(k.id(), key(7).id());
        let missing = dir.path().join("none.key");
        let e = TeamKey::read(&missing).unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::Unreadable);
        assert!(e.to_string().contains("head -c 32 /dev/urandom"), "{e}");
        assert_eq!(
            TeamKey::read(dir.path()).unwrap_err().kind(),
            KeyErrorKind::NotAFile
        );
        assert_eq!(
            TeamKey::from_bytes(&[1; 31]).unwrap_err().kind(),
            KeyErrorKind::Size
        );
    }

    #[test]
    fn a_fifo_at_the_key_path_is_refused_at_once_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("team.key");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // No writer ever opens the FIFO: a blocking open would hang here.
        let (tx, rx) = std::sync::mpsc::channel();
        let q = p.clone();
        std::thread::spawn(move || tx.send(TeamKey::read(&q)));
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reading a FIFO at the key path hangs")
            .unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::NotAFile);
        let m = e.to_string();
        assert!(
            m.contains(&p.display().to_string()) && m.contains("head -c 32 /dev/urandom"),
            "{m}"
        );
        // A character device is no key either (and is not read).
        let e = TeamKey::read(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), KeyErrorKind::NotAFile);
    }

    fn sealed(k: &TeamKey, start: u64, seq: u64) -> Vec<u8> {
        let b = crate::format::Beacon {
            seq,
            ..crate::testing::sample()
        };
        seal_beacon(k, start, &crate::format::encode(&b))
    }

    #[test]
    fn a_sealed_beacon_verifies_decodes_and_names_its_key_and_start() {
        let k = key(1);
        let d = sealed(&k, 0x0123_4567_89ab_cdef, 42);
        let text = std::str::from_utf8(&d).unwrap();
        assert!(
            text.ends_with(&format!(
                ",\"key\":\"{}\",\"start\":\"0123456789abcdef\",\"mac\":\"{}\"}}",
                k.id(),
                &text[text.len() - 66..text.len() - 2]
            )),
            "{text}"
        );
        assert_eq!(
            d.len(),
            crate::format::encode(&crate::testing::sample()).len() + SEAL_LEN
        );
        assert_eq!(
            open_beacon(&k, &d),
            Ok(BeaconSeal {
                key_id: k.id().to_string(),
                start: 0x0123_4567_89ab_cdef
            })
        );
        // A reader without the key reads the beacon and ignores the seal.
        assert_eq!(crate::format::decode(&d).unwrap().seq, 42);
    }

    #[test]
    fn beacon_seal_refusals_are_told_apart() {
        use BeaconRefusalKind as K;
        let k = key(1);
        let kind = |d: &[u8]| open_beacon(&k, d).unwrap_err().kind();
        let plain = crate::format::encode(&crate::testing::sample());
        assert_eq!(kind(&plain), K::Unsealed);
        assert_eq!(kind(b""), K::Unsealed);
        // Another team's key: its id.
        assert_eq!(kind(&sealed(&key(2), 1, 1)), K::WrongKeyId);
        // Another key under this key's id: the MAC.
        let mut same_id = key(3);
        same_id.id = k.id.clone();
        assert_eq!(kind(&sealed(&same_id, 1, 1)), K::BadMac);
        // Any field changed after sealing: the MAC.
        let good = sealed(&k, 1, 7);
        let text = String::from_utf8(good.clone()).unwrap();
        for (from, to) in [
            ("\"seq\":7", "\"seq\":8"),
            ("\"motion\":\"awake\"", "\"motion\":\"none\""),
            (
                "\"start\":\"0000000000000001\"",
                "\"start\":\"0000000000000002\"",
            ),
        ] {
            assert!(text.contains(from), "{from}");
            assert_eq!(kind(text.replace(from, to).as_bytes()), K::BadMac, "{to}");
        }
        // A seal whose fields are not as documented.
        let no_start = text.replace(",\"start\":\"0000000000000001\"", "");
        assert_eq!(kind(no_start.as_bytes()), K::Malformed);
        let bad_hex = format!("{}zz\"}}", &text[..text.len() - 4]);
        assert_eq!(kind(bad_hex.as_bytes()), K::Malformed);
        assert!(open_beacon(&k, &good).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn a_sealed_beacon_with_any_byte_changed_or_cut_never_verifies(
            start in any::<u64>(), seq in any::<u64>(), at in any::<usize>(), byte in any::<u8>(),
        ) {
            let k = key(5);
            let d = sealed(&k, start, seq);
            prop_assert!(open_beacon(&k, &d).is_ok());
            let cut = at % d.len();
            prop_assert!(open_beacon(&k, &d[..cut]).is_err());
            let mut flipped = d.clone();
            let i = at % d.len();
            flipped[i] = byte;
            // Upper-casing a hex digit of the MAC keeps its value.
            let same_mac = i >= d.len() - 66 && d[i].eq_ignore_ascii_case(&byte);
            if flipped != d && !same_mac {
                prop_assert!(open_beacon(&k, &flipped).is_err());
            }
            let _ = open_beacon(&k, &[d.as_slice(), &[byte]].concat());
        }

        #[test]
        fn garbage_beacons_never_panic_the_seal_check(d in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let _ = open_beacon(&key(5), &d);
            let mut p = crate::format::PREFIX.to_vec();
            p.extend_from_slice(&d);
            p.extend_from_slice(b",\"mac\":\"0000000000000000000000000000000000000000000000000000000000000000\"}");
            prop_assert!(open_beacon(&key(5), &p).is_err());
        }

        #[test]
        fn garbage_wakes_never_panic(d in proptest::collection::vec(any::<u8>(), 0..800)) {
            let _ = WakeDatagram::decode(&d);
        }

        #[test]
        fn garbage_after_the_prefix_is_malformed(t in proptest::collection::vec(any::<u8>(), 0..600)) {
            let d = [PREFIX.as_slice(), &t].concat();
            if let Err(e) = WakeDatagram::decode(&d) {
                prop_assert_eq!(e.kind(), WakeRefusalKind::Malformed);
            }
        }

        #[test]
        fn any_signed_wake_round_trips_and_only_verifies_for_its_own_page(
            body in "[A-Za-z0-9_.:-]{1,32}", nonce in any::<u64>(), generation in any::<u64>(),
            other_nonce in any::<u64>(), other_gen in any::<u64>(), kb in any::<u8>(),
        ) {
            let k = key(kb);
            let d = sign(&k, &body, nonce, generation);
            let back = WakeDatagram::decode(&d.encode()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, &d);
            prop_assert!(verify(Some(&k), &back, &body, nonce, Some(generation)).is_ok());
            if other_nonce != nonce {
                prop_assert!(verify(Some(&k), &back, &body, other_nonce, Some(generation)).is_err());
            }
            if other_gen != generation {
                prop_assert!(verify(Some(&k), &back, &body, nonce, Some(other_gen)).is_err());
            }
        }

        #[test]
        fn truncated_or_flipped_wakes_never_verify(
            nonce in any::<u64>(), generation in any::<u64>(), at in any::<usize>(), byte in any::<u8>(),
        ) {
            let k = key(9);
            let bytes = sign(&k, BODY, nonce, generation).encode();
            let cut = at % bytes.len();
            prop_assert!(WakeDatagram::decode(&bytes[..cut]).is_err());
            let mut flipped = bytes.clone();
            let i = at % flipped.len();
            flipped[i] = byte;
            if flipped != bytes {
                // Case-changing a hex digit keeps the value; anything else
                // that still decodes must fail verification or be the same wake.
                if let Ok(d) = WakeDatagram::decode(&flipped) {
                    let ok = verify(Some(&k), &d, BODY, nonce, Some(generation)).is_ok();
                    prop_assert!(!ok || d == sign(&k, BODY, nonce, generation));
                }
            }
        }
    }
}
