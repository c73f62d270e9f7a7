//! Actuator messages: a msgpack map with any subset of LoLA's 11 actuator
//! keys, decoded with `rmp-serde` into fixed arrays (no allocation for the
//! values), and merged into a [`Command`].

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use nao_wire::{Command, JOINTS};

/// Sonar mode byte with both sonars on (both transmitters, both receivers,
/// periodic): the value of the reference recordings.
pub(super) const SONAR_BOTH: u8 = 0x0c;
/// Sonar mode byte with only the left sonar on (left transmitter, left
/// receiver, periodic).
pub(super) const SONAR_LEFT: u8 = 0x08;
/// Sonar mode byte with only the right sonar on (right transmitter, right
/// receiver, periodic).
pub(super) const SONAR_RIGHT: u8 = 0x0b;
/// Sonar mode byte with both sonars off.
pub(super) const SONAR_OFF: u8 = 0x00;

/// One decoded actuator message: each key present or not. The ear, eye and
/// skull LEDs are accepted with any value and ignored (the chest board does
/// not drive them); they are only counted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Actuation {
    /// `Position`: 25 radians, joint index order.
    pub position: Option<[f32; JOINTS]>,
    /// `Stiffness`: 25 values 0..1, joint index order.
    pub stiffness: Option<[f32; JOINTS]>,
    /// `Chest`: r, g, b 0..1.
    pub chest: Option<[f32; 3]>,
    /// `LFoot`: r, g, b 0..1.
    pub left_foot: Option<[f32; 3]>,
    /// `RFoot`: r, g, b 0..1.
    pub right_foot: Option<[f32; 3]>,
    /// `Sonar`: left, right on.
    pub sonar: Option<[bool; 2]>,
    /// How many of `LEar`, `REar`, `LEye`, `REye`, `Skull` were present.
    pub ignored_leds: u8,
}

/// A LoLA LED value 0..1 as the protocol's u8: `round(clamp(v, 0, 1) * 255)`
/// (round half away from zero, in f64); not a finite number: 0.
pub(super) fn led_u8(v: f32) -> u8 {
    if !v.is_finite() {
        return 0;
    }
    (f64::from(v.clamp(0.0, 1.0)) * 255.0).round() as u8
}

/// LoLA's `Sonar` `[left, right]` as the protocol's sonar mode byte:
/// both [`SONAR_BOTH`], left only [`SONAR_LEFT`], right only
/// [`SONAR_RIGHT`], none [`SONAR_OFF`].
pub(super) fn sonar_mode(sonar: [bool; 2]) -> u8 {
    match sonar {
        [true, true] => SONAR_BOTH,
        [true, false] => SONAR_LEFT,
        [false, true] => SONAR_RIGHT,
        [false, false] => SONAR_OFF,
    }
}

impl Actuation {
    /// Merges the keys present into `cmd`; absent keys leave `cmd` as it
    /// was (LoLA keeps an actuator's last value).
    pub(super) fn apply(&self, cmd: &mut Command) {
        if let Some(p) = self.position {
            cmd.position = p;
        }
        if let Some(s) = self.stiffness {
            cmd.stiffness = s;
        }
        if let Some(c) = self.chest {
            cmd.chest_led = c.map(led_u8);
        }
        if let Some(c) = self.left_foot {
            cmd.left_foot_led = c.map(led_u8);
        }
        if let Some(c) = self.right_foot {
            cmd.right_foot_led = c.map(led_u8);
        }
        if let Some(s) = self.sonar {
            cmd.sonar_mode = sonar_mode(s);
        }
    }
}

/// Why a client's bytes are not an actuator message.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum DecodeError {
    /// The bytes so far are the start of a message: wait for more.
    Incomplete,
    /// Not a LoLA actuator message; the text says what and how to fix it.
    Malformed(String),
}

/// Decodes one actuator message from the start of `buf`. Returns the
/// message and the bytes it took; [`DecodeError::Incomplete`] when `buf`
/// holds only its beginning. Never panics.
///
/// `rmp-serde`'s reader allocates one 128-byte scratch buffer per call (for
/// the map's key strings); values are decoded into fixed arrays.
pub(super) fn decode(buf: &[u8]) -> Result<(Actuation, usize), DecodeError> {
    if buf.is_empty() {
        return Err(DecodeError::Incomplete);
    }
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(buf));
    let at = Cell::new("the message");
    match de::DeserializeSeed::deserialize(ActuationSeed(&at), &mut de) {
        Ok(a) => Ok((a, de.position() as usize)),
        Err(e) => Err(classify(e, at.get())),
    }
}

fn classify(e: rmp_serde::decode::Error, at: &str) -> DecodeError {
    use rmp_serde::decode::Error as E;
    let eof = |io: &std::io::Error| io.kind() == std::io::ErrorKind::UnexpectedEof;
    match &e {
        E::InvalidMarkerRead(io) | E::InvalidDataRead(io) if eof(io) => DecodeError::Incomplete,
        _ => DecodeError::Malformed(format!("in {at}: {e}")),
    }
}

/// What a LoLA actuator key is to the decoder.
#[derive(Debug, Clone, Copy)]
enum Key {
    Position,
    Stiffness,
    Chest,
    LFoot,
    RFoot,
    Sonar,
    IgnoredLed,
}

/// LoLA's 11 actuator keys, each with what it is to the decoder.
const KEYS: [(&str, Key); 11] = [
    ("Position", Key::Position),
    ("Stiffness", Key::Stiffness),
    ("Chest", Key::Chest),
    ("LFoot", Key::LFoot),
    ("RFoot", Key::RFoot),
    ("LEar", Key::IgnoredLed),
    ("REar", Key::IgnoredLed),
    ("LEye", Key::IgnoredLed),
    ("REye", Key::IgnoredLed),
    ("Skull", Key::IgnoredLed),
    ("Sonar", Key::Sonar),
];

/// The names of [`KEYS`], shown as a list in the messages.
struct KeyNames;

impl fmt::Debug for KeyNames {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_list().entries(KEYS.iter().map(|(n, _)| n)).finish()
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "one of LoLA's actuator keys {KeyNames:?}")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<Key, E> {
                KEYS.iter()
                    .find(|(name, _)| *name == k)
                    .map(|&(_, key)| key)
                    .ok_or_else(|| {
                        E::custom(format_args!(
                            "unknown actuator key {k:?}; LoLA's keys are {KeyNames:?}"
                        ))
                    })
            }
            fn visit_bytes<E: de::Error>(self, k: &[u8]) -> Result<Key, E> {
                match std::str::from_utf8(k) {
                    Ok(s) => self.visit_str(s),
                    Err(_) => Err(E::custom("an actuator key is not UTF-8 text")),
                }
            }
        }
        d.deserialize_str(V)
    }
}

/// LoLA's array `key`: exactly `N` values, each read as `T`.
struct ArraySeed<T, const N: usize> {
    key: &'static str,
    /// What the values are, for the messages (`numbers`, `booleans`).
    kind: &'static str,
    /// What LoLA's values stand for, after its count in a message.
    order: &'static str,
    values: PhantomData<T>,
}

/// `N` numbers (any msgpack number type) as f32.
const fn numbers<const N: usize>(key: &'static str) -> ArraySeed<f32, N> {
    ArraySeed {
        key,
        kind: "numbers",
        order: "",
        values: PhantomData,
    }
}

/// `Sonar`: left, right, each a boolean (or a number: non-zero is true).
const SONAR: ArraySeed<Flag, 2> = ArraySeed {
    key: "Sonar",
    kind: "booleans",
    order: " (left, right)",
    values: PhantomData,
};

impl<'de, T: Deserialize<'de> + Copy + Default, const N: usize> de::DeserializeSeed<'de>
    for ArraySeed<T, N>
{
    type Value = [T; N];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<[T; N], D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de> + Copy + Default, const N: usize> Visitor<'de> for ArraySeed<T, N> {
    type Value = [T; N];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "`{}` as an array of {N} {}", self.key, self.kind)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[T; N], A::Error> {
        let mut out = [T::default(); N];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = seq.next_element::<T>()?.ok_or_else(|| {
                de::Error::custom(format_args!(
                    "`{}` has {i} values; LoLA's has {N}{}",
                    self.key, self.order
                ))
            })?;
        }
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(format_args!(
                "`{}` has more than {N} values; LoLA's has {N}{}",
                self.key, self.order
            )));
        }
        Ok(out)
    }
}

/// The value of `seed.key` in `map`, noted in `at` while it is decoded.
fn read<'de, A: MapAccess<'de>, T: Deserialize<'de> + Copy + Default, const N: usize>(
    map: &mut A,
    at: &Cell<&'static str>,
    seed: ArraySeed<T, N>,
) -> Result<Option<[T; N]>, A::Error> {
    at.set(seed.key);
    map.next_value_seed(seed).map(Some)
}

/// One boolean (or a number: non-zero is true).
#[derive(Debug, Clone, Copy, Default)]
struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flag, E> {
                Ok(Flag(v != 0))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Flag, E> {
                Ok(Flag(v != 0))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Flag, E> {
                Ok(Flag(v != 0.0))
            }
        }
        d.deserialize_any(V)
    }
}

/// Decodes an [`Actuation`], noting in `.0` the key whose value is being
/// decoded (for the error message).
struct ActuationSeed<'a>(&'a Cell<&'static str>);

impl<'de> de::DeserializeSeed<'de> for ActuationSeed<'_> {
    type Value = Actuation;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Actuation, D::Error> {
        struct V<'a>(&'a Cell<&'static str>);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = Actuation;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a LoLA actuator message (a map with keys {KeyNames:?})")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Actuation, A::Error> {
                let mut a = Actuation::default();
                loop {
                    self.0.set("a key");
                    let Some(key) = map.next_key::<Key>()? else {
                        break;
                    };
                    match key {
                        Key::Position => a.position = read(&mut map, self.0, numbers("Position"))?,
                        Key::Stiffness => {
                            a.stiffness = read(&mut map, self.0, numbers("Stiffness"))?
                        }
                        Key::Chest => a.chest = read(&mut map, self.0, numbers("Chest"))?,
                        Key::LFoot => a.left_foot = read(&mut map, self.0, numbers("LFoot"))?,
                        Key::RFoot => a.right_foot = read(&mut map, self.0, numbers("RFoot"))?,
                        Key::Sonar => {
                            a.sonar = read(&mut map, self.0, SONAR)?.map(|s| s.map(|Flag(v)| v))
                        }
                        Key::IgnoredLed => {
                            self.0.set("an ignored LED key");
                            map.next_value::<IgnoredAny>()?;
                            a.ignored_leds = a.ignored_leds.saturating_add(1);
                        }
                    }
                }
                Ok(a)
            }
        }
        d.deserialize_map(V(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// What HULKs' LoLA client sends, every key, in its order.
    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Hulks {
        chest: [f32; 3],
        l_ear: [f32; 10],
        l_eye: [f32; 24],
        l_foot: [f32; 3],
        position: [f32; 25],
        r_ear: [f32; 10],
        r_eye: [f32; 24],
        r_foot: [f32; 3],
        skull: [f32; 12],
        sonar: [bool; 2],
        stiffness: [f32; 25],
    }

    fn hulks() -> Vec<u8> {
        rmp_serde::to_vec_named(&Hulks {
            chest: [0.0, 1.0, 0.5],
            l_ear: [1.0; 10],
            l_eye: [1.0; 24],
            l_foot: [1.0, 0.0, 0.0],
            position: std::array::from_fn(|j| j as f32 * 0.1),
            r_ear: [1.0; 10],
            r_eye: [1.0; 24],
            r_foot: [0.0, 0.0, 1.0],
            skull: [1.0; 12],
            sonar: [true, true],
            stiffness: [0.7; 25],
        })
        .unwrap()
    }

    #[test]
    fn actuator_message_with_every_key_decodes() {
        let bytes = hulks();
        let (a, used) = decode(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(a.stiffness, Some([0.7; 25]));
        assert_eq!(a.position.unwrap()[24], 2.4);
        assert_eq!(a.sonar, Some([true, true]));
        assert_eq!(a.ignored_leds, 5);
        let mut c = Command::default();
        a.apply(&mut c);
        assert_eq!(c.chest_led, [0, 255, 128]);
        assert_eq!(c.left_foot_led, [255, 0, 0]);
        assert_eq!(c.right_foot_led, [0, 0, 255]);
        assert_eq!(c.sonar_mode, SONAR_BOTH);
        assert_eq!(c.stiffness, [0.7; 25]);
    }

    #[test]
    fn actuator_message_subset_keeps_other_values() {
        #[derive(Serialize)]
        struct Only {
            #[serde(rename = "Stiffness")]
            stiffness: [f64; 25],
        }
        let bytes = rmp_serde::to_vec_named(&Only {
            stiffness: [1.0; 25],
        })
        .unwrap();
        let (a, _) = decode(&bytes).unwrap();
        let mut c = Command {
            position: [0.3; 25],
            chest_led: [1, 2, 3],
            ..Command::default()
        };
        a.apply(&mut c);
        assert_eq!(c.stiffness, [1.0; 25]);
        assert_eq!(c.position, [0.3; 25]);
        assert_eq!(c.chest_led, [1, 2, 3]);
    }

    #[test]
    fn incomplete_message_waits_for_more_bytes() {
        let bytes = hulks();
        for cut in [1, 2, 10, bytes.len() / 2, bytes.len() - 1] {
            assert_eq!(
                decode(&bytes[..cut]),
                Err(DecodeError::Incomplete),
                "cut {cut}"
            );
        }
        assert_eq!(decode(&[]), Err(DecodeError::Incomplete));
    }

    #[test]
    fn two_messages_in_a_row_decode_one_at_a_time() {
        let mut bytes = hulks();
        let one = bytes.len();
        bytes.extend_from_slice(&hulks());
        let (_, used) = decode(&bytes).unwrap();
        assert_eq!(used, one);
        let (_, used2) = decode(&bytes[used..]).unwrap();
        assert_eq!(used2, one);
    }

    fn malformed(bytes: &[u8]) -> String {
        match decode(bytes) {
            Err(DecodeError::Malformed(m)) => m,
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    /// What a message of one entry, `key` with `value`, is rejected for.
    fn malformed_entry(key: &str, value: impl Serialize) -> String {
        malformed(&rmp_serde::to_vec(&std::collections::BTreeMap::from([(key, value)])).unwrap())
    }

    /// A client's message whose ignored LED value is `depth` arrays deep,
    /// decoded on a thread with the LoLA server's stack.
    fn decode_nested_on_the_servers_stack(depth: usize) -> Result<usize, DecodeError> {
        let mut msg = vec![0x81, 0xa4, b'L', b'E', b'a', b'r'];
        msg.extend(std::iter::repeat_n(0x91, depth));
        msg.push(0xc0);
        std::thread::Builder::new()
            .stack_size(crate::lola::SERVER_STACK_BYTES)
            .spawn(move || decode(&msg).map(|(_, n)| n))
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn a_value_nested_past_the_depth_limit_is_malformed_within_the_servers_stack() {
        assert_eq!(decode_nested_on_the_servers_stack(1_000).unwrap(), 1_007);
        for depth in [1_100, 1_000_000] {
            match decode_nested_on_the_servers_stack(depth) {
                Err(DecodeError::Malformed(m)) => assert!(m.contains("depth limit"), "{m}"),
                other => panic!("depth {depth}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_messages_name_the_problem() {
        // Not a map.
        let m = malformed(&rmp_serde::to_vec(&[1.0f32, 2.0]).unwrap());
        assert!(m.contains("actuator message"), "{m}");
        // Unknown key.
        let m = malformed_entry("Stifness", [1.0f32; 25]);
        assert!(m.contains("Stifness"), "{m}");
        // Wrong length.
        let m = malformed_entry("Position", [1.0f32; 24]);
        assert!(m.contains("24") && m.contains("25"), "{m}");
        let m = malformed_entry("Chest", [1.0f32; 4]);
        assert!(m.contains("more than 3"), "{m}");
        // Not numbers.
        let m = malformed_entry("Chest", ["a", "b", "c"]);
        assert!(m.contains("in Chest"), "{m}");
        // A reserved marker byte.
        let m = malformed(&[0xc1]);
        assert!(!m.is_empty());
    }

    #[test]
    fn led_values_map_to_u8_rounding_half_away_from_zero() {
        assert_eq!(led_u8(0.0), 0);
        assert_eq!(led_u8(1.0), 255);
        assert_eq!(led_u8(0.5), 128);
        assert_eq!(led_u8(-3.0), 0);
        assert_eq!(led_u8(7.0), 255);
        assert_eq!(led_u8(f32::NAN), 0);
        assert_eq!(led_u8(f32::INFINITY), 0);
    }

    #[test]
    fn sonar_bools_map_to_the_sonar_mode_byte() {
        assert_eq!(sonar_mode([true, true]), 0x0c);
        assert_eq!(sonar_mode([true, false]), 0x08);
        assert_eq!(sonar_mode([false, true]), 0x0b);
        assert_eq!(sonar_mode([false, false]), 0x00);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
