//! Start-up (`docs/protocol.md` section 6): the link step, the preference block, the
//! bootloader ids and the two device start-up frames.
//!
//! [`link_up`] is step 1 alone (the guard's takeover and every reconnect);
//! [`Startup::run`] is steps 1 to 4 and returns the robot's [`Identity`].

use core::fmt;

use super::frame::{Frame, FrameError, FrameWriter, MAX_FRAME_LEN};
use super::prefs::{Prefs, PrefsError};
use super::tables::*;
use crate::link::{Link, LinkError, PRODUCT_ID, VENDOR_ID};

/// The chest board's firmware version (the VERSION request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChestVersion {
    /// Major.
    pub major: u8,
    /// Minor.
    pub minor: u8,
    /// Patch.
    pub patch: u8,
}

impl fmt::Display for ChestVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What start-up learns about the robot.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The chest board's version.
    pub chest_version: ChestVersion,
    /// The checked preference block: body id, serials, zero positions,
    /// foot pressure and IMU calibration.
    pub prefs: Prefs,
    /// The three bootloader ids (BOOT_ID wValue 0, 1, 2), 8 bytes each.
    pub boot_ids: [[u8; BOOT_ID_LEN]; BOOT_IDS],
    /// The 64 bytes read from each EEPROM (`0x40`, `0x41`) at offset 0.
    pub eeproms: [Vec<u8>; 2],
}

impl Identity {
    /// The body id.
    pub fn body_id(&self) -> &str {
        &self.prefs.body_id
    }
}

/// Why start-up stopped. The runtime sends no frame after one of these.
#[derive(Debug, Clone, PartialEq)]
pub enum StartupError {
    /// A USB call failed.
    Link {
        /// The call, e.g. `open ffff:0006` or `PREFS offset 2048`.
        step: String,
        /// What kind of failure.
        error: LinkError,
        /// The link's words for it ([`Link::detail`]), if it had any.
        detail: Option<String>,
    },
    /// A control transfer returned fewer bytes than asked.
    ShortRead {
        /// The request.
        step: String,
        /// Bytes expected.
        expected: usize,
        /// Bytes returned.
        found: usize,
    },
    /// The preference block failed its checks.
    Prefs(PrefsError),
    /// A start-up frame's answer was invalid (sync, CRC, seq, layout).
    BadAnswer {
        /// Seq of the start-up frame (0 or 1).
        seq: u16,
        /// Why.
        error: FrameError,
    },
    /// A device did not answer, answered wrongly, or reported an error.
    Device {
        /// Seq of the start-up frame (0 or 1).
        seq: u16,
        /// The device's address.
        address: u8,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::Link {
                step,
                error,
                detail: Some(d),
            } => write!(f, "start-up: {step}: {error}: {d}"),
            StartupError::Link { step, error, .. } => write!(f, "start-up: {step}: {error}"),
            StartupError::ShortRead {
                step,
                expected,
                found,
            } => {
                write!(
                    f,
                    "start-up: {step}: expected {expected} bytes, the chest board gave {found}"
                )
            }
            StartupError::Prefs(e) => write!(f, "start-up: {e}"),
            StartupError::BadAnswer { seq, error } => {
                write!(
                    f,
                    "start-up: answer to start-up frame {seq} is invalid: {error}"
                )
            }
            StartupError::Device {
                seq,
                address,
                reason,
            } => write!(
                f,
                "start-up: {} in start-up frame {seq}: {reason}",
                device_name(*address)
            ),
        }
    }
}

impl std::error::Error for StartupError {}

impl From<PrefsError> for StartupError {
    fn from(e: PrefsError) -> Self {
        StartupError::Prefs(e)
    }
}

/// The result of a call made for step `what`; a failure keeps the link's
/// [`Link::detail`].
fn step<T>(r: Result<T, LinkError>, what: &str, link: &dyn Link) -> Result<T, StartupError> {
    r.map_err(|error| StartupError::Link {
        step: what.to_string(),
        error,
        detail: link.detail().map(str::to_string),
    })
}

fn control_in_exact(
    link: &mut dyn Link,
    request: VendorRequest,
    value: u16,
    index: u16,
    buf: &mut [u8],
    what: &str,
) -> Result<(), StartupError> {
    let n = step(
        link.control_in(request.request_type(), request.into(), value, index, buf),
        what,
        &*link,
    )?;
    if n < buf.len() {
        return Err(StartupError::ShortRead {
            step: what.to_string(),
            expected: buf.len(),
            found: n,
        });
    }
    Ok(())
}

/// Step 1, the link: open `ffff:0006`, set configuration 1, START, claim
/// interface 0, VERSION. The guard's takeover and every reconnect run this
/// alone.
///
/// # Errors
///
/// [`StartupError::Link`] naming the first call that failed, or
/// [`StartupError::ShortRead`] for a short VERSION answer.
pub fn link_up(link: &mut dyn Link) -> Result<ChestVersion, StartupError> {
    step(link.open(VENDOR_ID, PRODUCT_ID), "open ffff:0006", &*link)?;
    step(
        link.set_configuration(CONFIGURATION),
        "set_configuration 1",
        &*link,
    )?;
    let start = VendorRequest::Start;
    step(
        link.control_out(start.request_type(), start.into(), 0, 0, &[]),
        "START request",
        &*link,
    )?;
    step(link.claim_interface(INTERFACE), "claim_interface 0", &*link)?;
    let mut v = [0u8; VERSION_LEN];
    control_in_exact(
        link,
        VendorRequest::Version,
        0,
        0,
        &mut v,
        "VERSION request",
    )?;
    Ok(ChestVersion {
        major: v[0],
        minor: v[1],
        patch: v[2],
    })
}

/// Step 2: reads the 4,635-byte preference block in five PREFS requests and
/// checks it.
pub(crate) fn read_prefs(link: &mut dyn Link) -> Result<Prefs, StartupError> {
    let mut block = vec![0u8; PREFS_LEN];
    let mut offset = 0;
    while offset < PREFS_LEN {
        let len = prefs_chunk_len(offset);
        let what = format!("PREFS request at offset {offset}");
        control_in_exact(
            link,
            VendorRequest::Prefs,
            0,
            offset as u16,
            &mut block[offset..offset + len],
            &what,
        )?;
        offset += len;
    }
    Ok(Prefs::parse(&block)?)
}

/// Builds start-up frame 0: START to sonar, chest and both EEPROMs, then
/// EEPROM_READ offset 0 length 64 to `0x40` and `0x41`. Returns its length.
///
/// # Errors
///
/// [`FrameError::Overflow`] when `buf` cannot hold the frame.
pub(crate) fn build_startup_frame_0(buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = FrameWriter::frame(buf, 0)?;
    for a in [ADDR_SONAR, ADDR_CHEST, ADDR_EEPROM_A, ADDR_EEPROM_B] {
        w.push(a, BoardCommand::Start.into(), &[])?;
    }
    for a in [ADDR_EEPROM_A, ADDR_EEPROM_B] {
        w.push(a, BoardCommand::EepromRead.into(), &[0, 0, EEPROM_READ_LEN])?;
    }
    Ok(w.finish())
}

/// Builds start-up frame 1: TEMP_TRACKING to `0xf0` then `0xf1`, then START
/// to the inertial unit. Returns its length.
///
/// # Errors
///
/// [`FrameError::Overflow`] when `buf` cannot hold the frame.
pub(crate) fn build_startup_frame_1(buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = FrameWriter::frame(buf, 1)?;
    w.push(ADDR_BUS_A, BoardCommand::TempTracking.into(), &[])?;
    w.push(ADDR_BUS_B, BoardCommand::TempTracking.into(), &[])?;
    w.push(ADDR_IMU, BoardCommand::Start.into(), &[])?;
    Ok(w.finish())
}

fn find<'a>(frame: &Frame<'a>, address: u8, kind: AnswerKind) -> Option<&'a [u8]> {
    frame
        .messages()
        .find(|m| m.address == address && m.command == u8::from(kind))
        .map(|m| m.payload)
}

fn check_status(frame: &Frame<'_>, seq: u16, address: u8) -> Result<(), StartupError> {
    match find(frame, address, AnswerKind::Status) {
        None => Err(StartupError::Device {
            seq,
            address,
            reason: "no status answer (0x82); check the board's cable".into(),
        }),
        Some(p) if p.len() != 1 => Err(StartupError::Device {
            seq,
            address,
            reason: format!("status answer of {} bytes, expected 1", p.len()),
        }),
        Some(p) if p[0] != 0 => Err(StartupError::Device {
            seq,
            address,
            reason: format!("reports status {:#04x}, expected 0 (ok)", p[0]),
        }),
        Some(_) => Ok(()),
    }
}

/// Checks the answer to start-up frame 0; returns the two EEPROMs' bytes.
pub(crate) fn check_startup_answer_0(answer: &[u8]) -> Result<[Vec<u8>; 2], StartupError> {
    let f = Frame::parse_answer(answer, 0)
        .map_err(|error| StartupError::BadAnswer { seq: 0, error })?;
    for a in [ADDR_SONAR, ADDR_CHEST, ADDR_EEPROM_A, ADDR_EEPROM_B] {
        check_status(&f, 0, a)?;
    }
    let mut out: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    for (i, a) in [ADDR_EEPROM_A, ADDR_EEPROM_B].into_iter().enumerate() {
        match find(&f, a, AnswerKind::EepromRead) {
            Some(p) if p.len() == EEPROM_READ_LEN as usize => out[i] = p.to_vec(),
            Some(p) => {
                return Err(StartupError::Device {
                    seq: 0,
                    address: a,
                    reason: format!("EEPROM_READ answer of {} bytes, expected 64", p.len()),
                })
            }
            None => {
                return Err(StartupError::Device {
                    seq: 0,
                    address: a,
                    reason: "no EEPROM_READ answer (0x83)".into(),
                })
            }
        }
    }
    Ok(out)
}

/// Checks the answer to start-up frame 1.
pub(crate) fn check_startup_answer_1(answer: &[u8]) -> Result<(), StartupError> {
    let f = Frame::parse_answer(answer, 1)
        .map_err(|error| StartupError::BadAnswer { seq: 1, error })?;
    for a in [ADDR_BUS_A, ADDR_BUS_B, ADDR_IMU] {
        check_status(&f, 1, a)?;
    }
    Ok(())
}

fn exchange(
    link: &mut dyn Link,
    frame: &[u8],
    answer: &mut [u8],
    seq: u16,
) -> Result<usize, StartupError> {
    step(
        link.bulk_out(EP_OUT, frame),
        &format!("writing start-up frame {seq}"),
        &*link,
    )?;
    step(
        link.bulk_in(EP_IN, answer),
        &format!("reading the answer to start-up frame {seq}"),
        &*link,
    )
}

/// The start-up sequence, steps 1 to 4.
pub struct Startup;

impl Startup {
    /// Runs steps 1 to 4 on `link`: link, preferences, bootloader ids, the
    /// two device start-up frames (seq 0 and 1, each answered at once).
    /// On an error the link is left open; the caller closes it.
    ///
    /// # Errors
    ///
    /// The [`StartupError`] of the first step that failed: a USB call
    /// ([`StartupError::Link`]), a short control answer, the preference
    /// block's checks, a start-up answer that does not parse, or a device
    /// that did not answer or answered wrongly.
    pub fn run(link: &mut dyn Link) -> Result<Identity, StartupError> {
        let chest_version = link_up(link)?;
        let prefs = read_prefs(link)?;
        let mut boot_ids = [[0u8; BOOT_ID_LEN]; BOOT_IDS];
        for (n, id) in boot_ids.iter_mut().enumerate() {
            control_in_exact(
                link,
                VendorRequest::BootId,
                n as u16,
                0,
                id,
                &format!("BOOT_ID request {n}"),
            )?;
        }
        let mut frame = [0u8; MAX_FRAME_LEN];
        let mut answer = [0u8; BULK_IN_LEN];
        let n = build_startup_frame_0(&mut frame)
            .map_err(|error| StartupError::BadAnswer { seq: 0, error })?;
        let got = exchange(link, &frame[..n], &mut answer, 0)?;
        let eeproms = check_startup_answer_0(&answer[..got])?;
        let n = build_startup_frame_1(&mut frame)
            .map_err(|error| StartupError::BadAnswer { seq: 1, error })?;
        let got = exchange(link, &frame[..n], &mut answer, 1)?;
        check_startup_answer_1(&answer[..got])?;
        Ok(Identity {
            chest_version,
            prefs,
            boot_ids,
            eeproms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_bytes::{hex, STARTUP_FRAME_0};

    #[test]
    fn startup_frame_0_starts_sonar_chest_eeproms_then_reads_both_eeproms() {
        let mut b = [0u8; 512];
        let n = build_startup_frame_0(&mut b).unwrap();
        assert_eq!(&b[..n], &hex(STARTUP_FRAME_0)[..]);
    }

    #[test]
    fn startup_frame_1_starts_temp_tracking_then_imu() {
        let mut b = [0u8; 512];
        let n = build_startup_frame_1(&mut b).unwrap();
        assert_eq!(&b[..n], &hex("a5010003f01200f112000102005c21")[..]);
    }

    /// Start-up answer 1 with one status message per `(address, status)`.
    fn check_answer_1(statuses: &[(u8, u8)]) -> Result<(), StartupError> {
        let mut b = [0u8; 64];
        let mut w = FrameWriter::answer(&mut b, 1).unwrap();
        for &(address, status) in statuses {
            w.push(address, AnswerKind::Status.into(), &[status])
                .unwrap();
        }
        let n = w.finish();
        check_startup_answer_1(&b[..n])
    }

    /// The device an error names, if it is a device error.
    fn device(e: &StartupError) -> Option<u8> {
        match e {
            StartupError::Device { address, .. } => Some(*address),
            _ => None,
        }
    }

    #[test]
    fn startup_answer_with_nonzero_status_names_the_device() {
        let e = check_answer_1(&[(ADDR_BUS_A, 0), (ADDR_BUS_B, 3), (ADDR_IMU, 0)]).unwrap_err();
        assert_eq!(device(&e), Some(ADDR_BUS_B), "{e}");
        assert!(e.to_string().contains("motor bus B"));
        assert!(check_startup_answer_1(&hex("5a010003f0820100f1820100018201008b09")).is_ok());
    }

    #[test]
    fn startup_answer_missing_a_device_names_it() {
        let e = check_answer_1(&[(ADDR_BUS_A, 0), (ADDR_BUS_B, 0)]).unwrap_err();
        assert_eq!(device(&e), Some(ADDR_IMU), "{e}");
    }
}
