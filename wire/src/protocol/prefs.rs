//! The preference block (`docs/protocol.md` section 2): 4,635 bytes read from the chest
//! board at start-up, checked by magic, layout version and CRC-32/ISO-HDLC.

use core::fmt;

use crc::{Crc, CRC_32_ISO_HDLC};

use super::tables::PREFS_LEN;
use crate::command::JOINTS;

/// The magic at offset 0.
const PREFS_MAGIC: [u8; 4] = *b"NPRF";
/// The layout version at offset 4.
const PREFS_LAYOUT_VERSION: u16 = 1;
/// Bytes of the body id.
pub const BODY_ID_LEN: usize = 20;
/// Number of stored serial numbers: IMU, battery, sonar, chest, 13 joint boards.
pub(crate) const SERIAL_COUNT: usize = 17;
/// Bytes of one serial number.
const SERIAL_LEN: usize = 16;

// The fields follow each other: each starts where the one before ends.
/// Offset of the body id, after the magic and the layout version: 6.
const OFFSET_BODY_ID: usize = 4 + 2;
/// Offset of the 17 stored serial numbers: 26.
const OFFSET_SERIALS: usize = OFFSET_BODY_ID + BODY_ID_LEN;
/// Offset of the 25 joint zero positions (u16 counts): 298.
const OFFSET_ZEROS: usize = OFFSET_SERIALS + SERIAL_COUNT * SERIAL_LEN;
/// Offset of the foot pressure gain and offset (f32 each) of 2 x 4 sensors: 348.
const OFFSET_FOOT_PRESSURE: usize = OFFSET_ZEROS + 2 * JOINTS;
/// Offset of the 6 IMU offsets (f32): 412.
const OFFSET_IMU: usize = OFFSET_FOOT_PRESSURE + 2 * 4 * 8;
/// Offset of the CRC-32, the block's last 4 bytes: 4631.
const OFFSET_CRC: usize = PREFS_LEN - 4;
const _: () = assert!(OFFSET_ZEROS == 298 && OFFSET_IMU == 412 && OFFSET_CRC == 4631);

const CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// CRC-32/ISO-HDLC (zlib's CRC-32).
pub(crate) fn crc32(data: &[u8]) -> u32 {
    CRC32.checksum(data)
}

/// A preference block that failed its checks: the field, what was expected
/// and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefsError {
    /// The field: `length`, `magic`, `layout version` or `crc`.
    pub field: &'static str,
    /// The expected value, as text.
    pub(crate) expected: String,
    /// The value found, as text.
    pub(crate) found: String,
}

impl fmt::Display for PrefsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "preference block: bad {}: expected {}, found {} (the chest board's stored preferences are damaged; restore them with Aldebaran's tools)",
            self.field, self.expected, self.found
        )
    }
}

impl std::error::Error for PrefsError {}

/// One foot pressure sensor's calibration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PressureCalibration {
    /// Gain.
    pub gain: f32,
    /// Offset.
    pub offset: f32,
}

impl PressureCalibration {
    /// The sensor's load in kg from its raw count: `raw x gain + offset`,
    /// as LoLA's `FSR` (the one place of this formula: the LoLA bridge's
    /// `FSR` and bring-up's foot load use it). Not a number when the
    /// calibration is not.
    pub fn kg(self, raw: u16) -> f32 {
        f32::from(raw) * self.gain + self.offset
    }
}

/// The fields of the preference block: [`Prefs::parse`] reads and checks
/// a block, [`Prefs::encode`] writes one (the virtual robot serves it).
#[derive(Debug, Clone, PartialEq)]
pub struct Prefs {
    /// The body id (ASCII, NULs stripped; at most [`BODY_ID_LEN`] bytes are
    /// stored).
    pub body_id: String,
    /// Stored serial numbers in device order: IMU, battery, sonar, chest, the
    /// 13 joint boards in address order (ASCII, NULs stripped; at most 16
    /// bytes each are stored).
    pub serials: [String; SERIAL_COUNT],
    /// Joint zero positions in counts, joint index order.
    pub zero: [u16; JOINTS],
    /// Foot pressure calibration: `[left, right][sensor]`.
    pub foot_pressure: [[PressureCalibration; 4]; 2],
    /// IMU offsets: accelerometer x, y, z then gyroscope x, y, z.
    pub imu_offsets: [f32; 6],
}

fn ascii(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Prefs {
    /// Checks and parses a preference block: its length (4,635), magic
    /// `NPRF`, layout version 1 and CRC-32 over bytes 0..4631. Never panics.
    ///
    /// # Errors
    ///
    /// A [`PrefsError`] naming the first of those checks that fails, with
    /// what it expected and what it found.
    pub fn parse(block: &[u8]) -> Result<Prefs, PrefsError> {
        let Ok(block) = <&[u8; PREFS_LEN]>::try_from(block) else {
            return Err(PrefsError {
                field: "length",
                expected: format!("{PREFS_LEN} bytes"),
                found: format!("{} bytes", block.len()),
            });
        };
        if block[0..4] != PREFS_MAGIC {
            return Err(PrefsError {
                field: "magic",
                expected: "4e505246 (NPRF)".into(),
                found: block[0..4].iter().map(|b| format!("{b:02x}")).collect(),
            });
        }
        let layout = u16::from_le_bytes([block[4], block[5]]);
        if layout != PREFS_LAYOUT_VERSION {
            return Err(PrefsError {
                field: "layout version",
                expected: PREFS_LAYOUT_VERSION.to_string(),
                found: layout.to_string(),
            });
        }
        let stored = u32::from_le_bytes([
            block[OFFSET_CRC],
            block[OFFSET_CRC + 1],
            block[OFFSET_CRC + 2],
            block[OFFSET_CRC + 3],
        ]);
        let computed = crc32(&block[..OFFSET_CRC]);
        if stored != computed {
            return Err(PrefsError {
                field: "crc",
                expected: format!("{computed:08x}"),
                found: format!("{stored:08x}"),
            });
        }
        Ok(Prefs::read(block))
    }

    /// The fields of a block at their offsets, without the checks of
    /// [`Prefs::parse`] (a simulator serving a damaged block still reads
    /// its zero positions).
    pub fn read(block: &[u8; PREFS_LEN]) -> Prefs {
        let body_id = ascii(&block[OFFSET_BODY_ID..OFFSET_BODY_ID + BODY_ID_LEN]);
        let serials = std::array::from_fn(|i| {
            let at = OFFSET_SERIALS + i * SERIAL_LEN;
            ascii(&block[at..at + SERIAL_LEN])
        });
        let zero = std::array::from_fn(|j| {
            let at = OFFSET_ZEROS + 2 * j;
            u16::from_le_bytes([block[at], block[at + 1]])
        });
        let foot_pressure = std::array::from_fn(|foot| {
            std::array::from_fn(|s| {
                let at = OFFSET_FOOT_PRESSURE + (foot * 4 + s) * 8;
                PressureCalibration {
                    gain: f32_at(block, at),
                    offset: f32_at(block, at + 4),
                }
            })
        });
        let imu_offsets = std::array::from_fn(|i| f32_at(block, OFFSET_IMU + 4 * i));
        Prefs {
            body_id,
            serials,
            zero,
            foot_pressure,
            imu_offsets,
        }
    }

    /// The valid block of these fields: magic, layout version, the fields
    /// at their offsets (a body id or serial number longer than its field
    /// is cut), CRC-32. [`Prefs::parse`] reads it back.
    pub fn encode(&self) -> Box<[u8; PREFS_LEN]> {
        let mut b = Box::new([0u8; PREFS_LEN]);
        b[0..4].copy_from_slice(&PREFS_MAGIC);
        b[4..6].copy_from_slice(&PREFS_LAYOUT_VERSION.to_le_bytes());
        put_ascii(
            &mut b[OFFSET_BODY_ID..OFFSET_BODY_ID + BODY_ID_LEN],
            &self.body_id,
        );
        for (i, s) in self.serials.iter().enumerate() {
            let at = OFFSET_SERIALS + SERIAL_LEN * i;
            put_ascii(&mut b[at..at + SERIAL_LEN], s);
        }
        let zeros = self.zero.iter().map(|z| z.to_le_bytes());
        put_all(&mut b[OFFSET_ZEROS..], zeros);
        let feet = self.foot_pressure.iter().flatten();
        let cal = feet.flat_map(|c| [c.gain, c.offset]).map(f32::to_le_bytes);
        put_all(&mut b[OFFSET_FOOT_PRESSURE..], cal);
        put_all(&mut b[OFFSET_IMU..], self.imu_offsets.map(f32::to_le_bytes));
        let crc = crc32(&b[..OFFSET_CRC]);
        b[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Writes `s` at the start of `field`, cut to its length.
fn put_ascii(field: &mut [u8], s: &str) {
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Writes the little-endian values one after the other from the start of `to`.
fn put_all<const N: usize>(to: &mut [u8], values: impl IntoIterator<Item = [u8; N]>) {
    for (dst, v) in to.chunks_exact_mut(N).zip(values) {
        dst.copy_from_slice(&v);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid block with body id `TEST`, zero 2048 for every joint.
    pub(crate) fn block() -> Vec<u8> {
        let mut b = vec![0u8; PREFS_LEN];
        b[0..4].copy_from_slice(b"NPRF");
        b[4..6].copy_from_slice(&1u16.to_le_bytes());
        b[6..10].copy_from_slice(b"TEST");
        b[26..29].copy_from_slice(b"IMU");
        for j in 0..JOINTS {
            b[OFFSET_ZEROS + 2 * j..OFFSET_ZEROS + 2 * j + 2]
                .copy_from_slice(&(2000 + j as u16).to_le_bytes());
        }
        b[OFFSET_IMU..OFFSET_IMU + 4].copy_from_slice(&1.5f32.to_le_bytes());
        let crc = crc32(&b[..OFFSET_CRC]);
        b[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn prefs_block_fields_are_read_at_their_offsets() {
        let p = Prefs::parse(&block()).unwrap();
        assert_eq!(p.body_id, "TEST");
        assert_eq!(p.serials[0], "IMU");
        assert_eq!(p.serials[1], "");
        assert_eq!(p.zero[0], 2000);
        assert_eq!(p.zero[24], 2024);
        assert_eq!(p.imu_offsets[0], 1.5);
    }

    #[test]
    fn encoded_prefs_parse_back_and_long_texts_are_cut() {
        let mut p = Prefs::parse(&block()).unwrap();
        p.foot_pressure[1][3] = PressureCalibration {
            gain: 0.0123,
            offset: -3.75,
        };
        p.imu_offsets[5] = 0.0004;
        let b = p.encode();
        assert_eq!(
            &b[..],
            &{
                let mut want = block();
                want[OFFSET_FOOT_PRESSURE + 7 * 8..][..8]
                    .copy_from_slice(&[0.0123f32.to_le_bytes(), (-3.75f32).to_le_bytes()].concat());
                want[OFFSET_IMU + 20..][..4].copy_from_slice(&0.0004f32.to_le_bytes());
                let crc = crc32(&want[..OFFSET_CRC]);
                want[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
                want
            }[..]
        );
        assert_eq!(Prefs::parse(&b[..]), Ok(p.clone()));
        p.body_id = "B".repeat(25);
        p.serials[16] = "S".repeat(17);
        let back = Prefs::parse(&p.encode()[..]).unwrap();
        assert_eq!(back.body_id, "B".repeat(BODY_ID_LEN));
        assert_eq!(back.serials[16], "S".repeat(SERIAL_LEN));
    }

    #[test]
    fn prefs_bad_magic_names_field_expected_and_found() {
        let mut b = block();
        b[0] = b'X';
        let e = Prefs::parse(&b).unwrap_err();
        assert_eq!(e.field, "magic");
        assert_eq!(e.found, "58505246");
        assert!(e.to_string().contains("expected 4e505246"));
    }

    #[test]
    fn prefs_bad_layout_version_is_rejected() {
        let mut b = block();
        b[4] = 2;
        let e = Prefs::parse(&b).unwrap_err();
        assert_eq!(
            (e.field, e.expected.as_str(), e.found.as_str()),
            ("layout version", "1", "2")
        );
    }

    #[test]
    fn prefs_bad_crc32_is_rejected() {
        let mut b = block();
        b[100] ^= 0x40;
        let e = Prefs::parse(&b).unwrap_err();
        assert_eq!(e.field, "crc");
        assert_ne!(e.expected, e.found);
    }

    #[test]
    fn prefs_wrong_length_is_rejected() {
        let e = Prefs::parse(&[0u8; 100]).unwrap_err();
        assert_eq!(e.field, "length");
    }

    #[test]
    fn crc32_is_iso_hdlc() {
        assert_eq!(crc32(b"123456789"), 0xcbf43926);
    }

    #[test]
    fn pressure_calibration_kg_is_raw_times_gain_plus_offset() {
        let c = PressureCalibration {
            gain: 0.01,
            offset: -1.0,
        };
        assert_eq!(c.kg(0), -1.0);
        assert!((c.kg(250) - 1.5).abs() < 1e-6);
        let nan = PressureCalibration {
            gain: f32::NAN,
            offset: 0.0,
        };
        assert!(nan.kg(1).is_nan());
    }
}
