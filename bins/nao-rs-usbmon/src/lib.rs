//! Import Linux usbmon captures (pcap or pcapng, as `tcpdump -i usbmonN -w`
//! or Wireshark write them) into the recording format, so that a session of
//! HAL on a real robot can be checked against nao-rs.
//!
//! What it reads: pcap (both byte orders, micro- and nanosecond magic) and
//! pcapng (section, interface, enhanced and simple packet blocks), both
//! containers read by the `pcap-file` crate; link types
//! 220 `LINUX_USB_MMAPPED` (64-byte usbmon header) and 189 `LINUX_USB`
//! (48-byte header). The usbmon header is read in the byte order of the file
//! (the capturing host's); the setup packet is little endian (USB).
//!
//! What it writes (details and the conventions in `docs/usbmon.md`):
//! - submit (`S`) and complete (`C`) / error (`E`) events are paired by URB id;
//! - only the chest board's device is kept: the one named with
//!   [`ImportOptions::device`], else the first device that sends one of the
//!   protocol's vendor requests (bmRequestType `40`/`c0`, bRequest `01`..`05`);
//! - control transfers become `control_out` / `control_in`, the standard
//!   request SET_CONFIGURATION (`00 09`) becomes `set_configuration`, other
//!   standard requests are left out (as comments); bulk transfers become
//!   `bulk_out` / `bulk_in`; interrupt and isochronous transfers are left out;
//! - `open ffff:0006` is written before the first call; `claim_interface 0`
//!   after each `set_configuration` and the START request right after it (the
//!   protocol's start-up order: set configuration, START, claim, VERSION); a
//!   later `set_configuration` is a reconnect, so `close` and `open` come
//!   before it (none of open, claim and close is a transfer usbmon sees);
//! - `cycle` lines are inferred (on by default): each frame after the two
//!   start-up frames starts a cycle, together with the CLIENT_STATE request
//!   and the `bulk_in` right before it; t_ms counts from the first event of
//!   the device.
//!
//! Bad input never panics: every error names the byte offset (and packet
//! number) where the capture stops making sense.

use std::collections::HashMap;
use std::fmt;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError};

use nao_wire::link::{Call, LinkError, Setup};
use nao_wire::protocol::frame::Frame;
use nao_wire::protocol::prefs::Prefs;
use nao_wire::protocol::safety::Safety;
use nao_wire::protocol::tables::{decode_position, Bus, PREFS_LEN, SYNC_FRAME};
use nao_wire::recording::{Recorded, RecordingWriter};
use nao_wire::Command;

pub mod verify;

/// pcap link type `LINUX_USB` (48-byte usbmon header).
pub const LINKTYPE_LINUX_USB: u32 = 189;
/// pcap link type `LINUX_USB_MMAPPED` (64-byte usbmon header).
pub const LINKTYPE_LINUX_USB_MMAPPED: u32 = 220;

/// How to import a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// The chest board's (bus, device number), as `lsusb` shows them; `None`:
    /// the first device that sends the protocol's vendor requests.
    pub device: Option<(u16, u8)>,
    /// Infer `cycle` lines (see the module doc).
    pub cycles: bool,
    /// Write an `accepted` setting (not on USB: the runtime's configuration).
    pub accepted: Option<Vec<u8>>,
    /// Write a `switch` setting (`true`: armed).
    pub switch_armed: Option<bool>,
    /// Read the controller's commands back from the frames and write them
    /// as `command` lines (`docs/usbmon.md`); needs `cycles`.
    pub commands: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            device: None,
            cycles: true,
            accepted: None,
            switch_armed: None,
            commands: false,
        }
    }
}

/// Why a capture could not be imported: the byte offset in the capture where
/// it went wrong and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// Byte offset in the capture file.
    pub offset: usize,
    /// What is wrong and, where it helps, what to do.
    pub reason: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte offset {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for ImportError {}

fn err(offset: usize, reason: impl Into<String>) -> ImportError {
    ImportError {
        offset,
        reason: reason.into(),
    }
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The recording text of the first session (`segments[0].text`).
    pub text: String,
    /// The chest board's first (bus, device number).
    pub device: (u16, u8),
    /// Every (bus, device number) the chest board had in the capture (more
    /// than one when it re-enumerated).
    pub devices: Vec<(u16, u8)>,
    /// Call lines written, all sessions.
    pub calls: usize,
    /// `cycle` lines written, all sessions.
    pub cycles: usize,
    /// Things left out or odd, also written as comments into the texts.
    pub warnings: Vec<String>,
    /// The sessions: a new one starts at each new program's start-up (HAL
    /// restarted); each is a recording of its own.
    pub segments: Vec<Segment>,
}

/// Imports a usbmon capture into recording text.
pub fn import_pcap(bytes: &[u8], opts: &ImportOptions) -> Result<String, ImportError> {
    import(bytes, opts).map(|i| i.text)
}

// ---------------------------------------------------------------- byte order

/// The byte order of the capture (the capturing host's), in which the
/// usbmon header is read.
#[derive(Clone, Copy, Debug)]
struct Endian {
    little: bool,
}

impl Endian {
    fn of(e: Endianness) -> Endian {
        Endian {
            little: e == Endianness::Little,
        }
    }

    /// The unsigned integer of `N` bytes at `at`, in this byte order.
    fn uint<const N: usize>(self, b: &[u8], at: usize) -> Option<u64> {
        let bytes = b.get(at..at.checked_add(N)?)?;
        let fold = |v: u64, x: &u8| v << 8 | u64::from(*x);
        Some(if self.little {
            bytes.iter().rev().fold(0, fold)
        } else {
            bytes.iter().fold(0, fold)
        })
    }
}

// ---------------------------------------------------------------- containers
//
// The pcap and pcapng containers are read by `pcap-file`; what is ours is
// the byte offsets in the messages and a capture cut short (tcpdump killed)
// being a warning, not an error.

/// One captured packet: where it stands and its bytes.
struct Packet<'a> {
    /// Byte offset of the packet's data in the file.
    offset: usize,
    /// 1-based packet number.
    number: usize,
    linktype: u32,
    endian: Endian,
    data: &'a [u8],
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

fn packets<'a>(
    bytes: &'a [u8],
    warnings: &mut Vec<String>,
) -> Result<Vec<Packet<'a>>, ImportError> {
    match bytes.first_chunk::<4>() {
        None => Err(err(
            0,
            format!(
                "too short for a capture ({} bytes): not a pcap file",
                bytes.len()
            ),
        )),
        Some(&PCAPNG_MAGIC) => pcapng(bytes, warnings),
        Some(
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0xa1, 0xb2, 0x3c, 0x4d],
        ) => pcap(bytes, warnings),
        Some(m) => Err(err(
            0,
            format!(
                "not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x}); capture with \
                 `tcpdump -i usbmonN -w FILE` or save from Wireshark",
                m[0], m[1], m[2], m[3]
            ),
        )),
    }
}

fn check_linktype(linktype: u32, offset: usize) -> Result<(), ImportError> {
    if linktype == LINKTYPE_LINUX_USB || linktype == LINKTYPE_LINUX_USB_MMAPPED {
        return Ok(());
    }
    Err(err(
        offset,
        format!(
            "link type {linktype} is not a usbmon capture (need 220 LINUX_USB_MMAPPED or 189 \
             LINUX_USB: capture with `tcpdump -i usbmonN`)"
        ),
    ))
}

/// pcap's record header: timestamp (8 bytes), captured length, length.
const PCAP_RECORD_HEADER: usize = 16;

fn pcap<'a>(bytes: &'a [u8], warnings: &mut Vec<String>) -> Result<Vec<Packet<'a>>, ImportError> {
    // The magic is known good: the only error left is a short header.
    let (mut rest, parser) = PcapParser::new(bytes).map_err(|_| {
        err(
            bytes.len(),
            format!("pcap header cut short ({} of 24 bytes)", bytes.len()),
        )
    })?;
    let header = parser.header();
    // The upper bits of the link type field are flags (FCS length).
    let linktype = u32::from(header.datalink) & 0x0fff_ffff;
    check_linktype(linktype, 20)?;
    let endian = Endian::of(header.endianness);
    let mut out = Vec::new();
    while !rest.is_empty() {
        let off = bytes.len() - rest.len();
        let number = out.len() + 1;
        let Ok((next, _)) = parser.next_raw_packet(rest) else {
            // The only error of a raw packet: the capture ends inside it.
            warnings.push(match endian.uint::<4>(rest, 8) {
                Some(incl) if rest.len() >= PCAP_RECORD_HEADER => format!(
                    "the capture ends inside packet {number} at byte offset {off} ({incl} bytes \
                     announced, {} left; ignored)",
                    rest.len() - PCAP_RECORD_HEADER
                ),
                _ => format!(
                    "the capture ends inside packet {number}'s record header at byte offset {off} (ignored)"
                ),
            });
            break;
        };
        out.push(Packet {
            offset: off + PCAP_RECORD_HEADER,
            number,
            linktype,
            endian,
            data: &rest[PCAP_RECORD_HEADER..rest.len() - next.len()],
        });
        rest = next;
    }
    Ok(out)
}

/// pcapng's block header (type, length) and the bytes before the packet
/// data in an enhanced packet block (interface, timestamp, two lengths) and
/// a simple packet block (length).
const BLOCK_HEADER: usize = 8;
const ENHANCED_PACKET_HEAD: usize = 20;
const SIMPLE_PACKET_HEAD: usize = 4;

fn pcapng<'a>(bytes: &'a [u8], warnings: &mut Vec<String>) -> Result<Vec<Packet<'a>>, ImportError> {
    let cut =
        |off: usize| format!("the capture ends inside a block at byte offset {off} (ignored)");
    let bad = |off: usize, e: PcapError| err(off, format!("pcapng block: {e}"));
    let mut out = Vec::new();
    let (mut rest, mut parser) = match PcapNgParser::new(bytes) {
        Ok(x) => x,
        Err(PcapError::IncompleteBuffer) => {
            warnings.push(cut(0));
            return Ok(out);
        }
        Err(e) => return Err(bad(0, e)),
    };
    let mut number = 0usize;
    while !rest.is_empty() {
        let off = bytes.len() - rest.len();
        let body_off = off + BLOCK_HEADER;
        let block = match parser.next_block(rest) {
            Ok((next, block)) => {
                rest = next;
                block
            }
            Err(PcapError::IncompleteBuffer) => {
                warnings.push(cut(off));
                break;
            }
            Err(e) => return Err(bad(off, e)),
        };
        let (head, len, interface) = match block {
            Block::EnhancedPacket(p) => {
                number += 1;
                let interface = parser.packet_interface(&p).ok_or_else(|| {
                    err(
                        body_off,
                        format!(
                            "pcapng packet {number}: interface {} was not described",
                            p.interface_id
                        ),
                    )
                })?;
                (ENHANCED_PACKET_HEAD, p.data.len(), interface.linktype)
            }
            Block::SimplePacket(p) => {
                number += 1;
                let interface = parser.interfaces().first().ok_or_else(|| {
                    err(
                        body_off,
                        format!("pcapng packet {number}: no interface was described"),
                    )
                })?;
                // The data of a simple packet block runs to the block's end
                // (with padding): the packet is its original length.
                let len = p.data.len().min(p.original_len as usize);
                (SIMPLE_PACKET_HEAD, len, interface.linktype)
            }
            _ => continue,
        };
        let linktype = u32::from(interface);
        check_linktype(linktype, body_off)?;
        let start = off + BLOCK_HEADER + head;
        out.push(Packet {
            offset: start,
            number,
            linktype,
            endian: Endian::of(parser.section().endianness),
            data: bytes.get(start..start + len).ok_or_else(|| {
                err(
                    body_off,
                    format!("pcapng packet {number}: longer than its block"),
                )
            })?,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------- usbmon

/// One usbmon event (the header of `struct usbmon_packet` and its data).
#[derive(Clone, Copy)]
struct Event<'a> {
    offset: usize,
    number: usize,
    id: u64,
    kind: u8,
    xfer: u8,
    ep: u8,
    dev: u8,
    bus: u16,
    setup: Option<[u8; 8]>,
    ts_us: i64,
    status: i32,
    length: u32,
    /// The captured data (may be shorter than `length`: see `cut`).
    data: &'a [u8],
    /// Whether the capture holds fewer data bytes than the event announced.
    cut: bool,
}

const XFER_CONTROL: u8 = 2;
const XFER_BULK: u8 = 3;

fn event<'a>(p: &Packet<'a>) -> Result<Event<'a>, ImportError> {
    let head = if p.linktype == LINKTYPE_LINUX_USB_MMAPPED {
        64
    } else {
        48
    };
    let d = p.data;
    if d.len() < head {
        return Err(err(
            p.offset,
            format!(
                "packet {}: {} bytes, shorter than the {head}-byte usbmon header",
                p.number,
                d.len()
            ),
        ));
    }
    let e = p.endian;
    // Bounds are checked above: every field lies in the header.
    let id = e.uint::<8>(d, 0).unwrap_or(0);
    let ts_sec = e.uint::<8>(d, 16).unwrap_or(0) as i64;
    let ts_usec = e.uint::<4>(d, 24).unwrap_or(0) as u32 as i32;
    let status = e.uint::<4>(d, 28).unwrap_or(0) as u32 as i32;
    let length = e.uint::<4>(d, 32).unwrap_or(0) as u32;
    let len_cap = e.uint::<4>(d, 36).unwrap_or(0) as usize;
    let flag_setup = d[14];
    let flag_data = d[15];
    let mut setup = [0u8; 8];
    setup.copy_from_slice(&d[40..48]);
    let avail = &d[head..];
    let (data, cut) = if flag_data == 0 {
        let n = len_cap.min(avail.len());
        (
            &avail[..n],
            n < len_cap || (len_cap as u64) < u64::from(length),
        )
    } else {
        (&avail[..0], false)
    };
    Ok(Event {
        offset: p.offset,
        number: p.number,
        id,
        kind: d[8],
        xfer: d[9],
        ep: d[10],
        dev: d[11],
        bus: e.uint::<2>(d, 12).unwrap_or(0) as u16,
        setup: (flag_setup == 0).then_some(setup),
        ts_us: ts_sec
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(ts_usec)),
        status,
        length,
        data,
        cut,
    })
}

fn is_spec_vendor_request(setup: &[u8; 8]) -> bool {
    matches!(setup[0], 0x40 | 0xc0) && (1..=5).contains(&setup[1])
}

/// A transfer: its submission and its completion (or error), if captured.
struct Transfer<'a> {
    submit: Event<'a>,
    done: Option<Event<'a>>,
}

/// What one transfer turns into.
enum Op {
    /// A call line.
    Call(Recorded),
    /// A transfer the format cannot hold (a failed control or bulk OUT):
    /// written as a comment; `frame` tells a failed bulk_out (it still
    /// starts a cycle).
    Failed { text: String, frame: bool },
    /// Left out, with a comment.
    Skipped(String),
}

/// A transfer's op, where it stands in the capture and, for a frame, its
/// seq.
struct Timed {
    op: Op,
    ts_us: i64,
    /// The packet number of its submission.
    number: usize,
    /// The seq of a frame (bulk OUT, sync `a5`), written or failed.
    seq: Option<u16>,
}

fn errno_name(status: i32) -> &'static str {
    match status {
        -2 => "ENOENT",
        -19 => "ENODEV",
        -32 => "EPIPE",
        -71 => "EPROTO",
        -75 => "EOVERFLOW",
        -84 => "EILSEQ",
        -104 => "ECONNRESET",
        -108 => "ESHUTDOWN",
        -110 => "ETIMEDOUT",
        _ => "errno",
    }
}

/// The recording's error for a failed bulk read, and whether it is exact.
fn bulk_error(status: i32) -> (LinkError, bool) {
    match status {
        // libusb cancels a timed-out transfer: the URB completes unlinked.
        -110 | -104 | -2 => (LinkError::Timeout, true),
        -32 => (LinkError::Pipe, true),
        -19 | -108 => (LinkError::NoDevice, true),
        _ => (LinkError::Pipe, false),
    }
}

fn op_of(t: &Transfer<'_>, warnings: &mut Vec<String>) -> Result<Op, ImportError> {
    let s = &t.submit;
    let Some(c) = &t.done else {
        return Ok(Op::Skipped(format!(
            "packet {}: a transfer on endpoint {:02x} was submitted but never completed in the capture",
            s.number, s.ep
        )));
    };
    let in_dir = s.ep & 0x80 != 0;
    let cut = |ev: &Event<'_>| {
        err(
            ev.offset,
            format!(
                "packet {}: only {} of {} data bytes captured; capture with a larger snap length \
                 (`tcpdump -s 0`)",
                ev.number,
                ev.data.len(),
                ev.length
            ),
        )
    };
    match s.xfer {
        XFER_CONTROL => {
            let Some(setup) = s.setup else {
                return Ok(Op::Skipped(format!(
                    "packet {}: a control submission without a setup packet",
                    s.number
                )));
            };
            let rt = setup[0];
            let rq = setup[1];
            let value = u16::from_le_bytes([setup[2], setup[3]]);
            let index = u16::from_le_bytes([setup[4], setup[5]]);
            let length = u16::from_le_bytes([setup[6], setup[7]]);
            let line = Setup {
                request_type: rt,
                request: rq,
                value,
                index,
            };
            if c.status != 0 {
                let kind = if rt & 0x80 != 0 {
                    "control_in"
                } else {
                    "control_out"
                };
                return Ok(Op::Failed {
                    text: format!(
                        "packet {}: {kind} {line} failed with status {} ({})",
                        c.number,
                        c.status,
                        errno_name(c.status)
                    ),
                    frame: false,
                });
            }
            if rt == 0x00 && rq == 0x09 {
                return Ok(Op::Call(Recorded::SetConfiguration(value as u8)));
            }
            if (rt >> 5) & 3 == 0 {
                return Ok(Op::Skipped(format!(
                    "packet {}: standard request {line} left out",
                    s.number
                )));
            }
            if rt & 0x80 != 0 {
                if c.cut {
                    return Err(cut(c));
                }
                if c.data.len() > usize::from(length) {
                    return Err(err(
                        c.offset,
                        format!(
                            "packet {}: control answer of {} bytes exceeds wLength {length}",
                            c.number,
                            c.data.len()
                        ),
                    ));
                }
                Ok(Op::Call(Recorded::ControlIn {
                    setup: line,
                    length,
                    answer: c.data.to_vec(),
                }))
            } else {
                if s.cut {
                    return Err(cut(s));
                }
                if s.data.len() != usize::from(length) {
                    warnings.push(format!(
                        "packet {}: control_out {line} carries {} bytes for wLength {length}",
                        s.number,
                        s.data.len()
                    ));
                }
                Ok(Op::Call(Recorded::ControlOut {
                    setup: line,
                    data: s.data.to_vec(),
                }))
            }
        }
        XFER_BULK if in_dir => {
            let length = s.length as usize;
            if c.status != 0 && c.data.is_empty() {
                let (e, exact) = bulk_error(c.status);
                if !exact {
                    warnings.push(format!(
                        "packet {}: bulk_in status {} ({}) written as !pipe",
                        c.number,
                        c.status,
                        errno_name(c.status)
                    ));
                }
                return Ok(Op::Call(Recorded::BulkIn {
                    endpoint: s.ep,
                    length,
                    answer: Err(e),
                }));
            }
            if c.cut {
                return Err(cut(c));
            }
            if c.data.len() > length {
                return Err(err(
                    c.offset,
                    format!(
                        "packet {}: bulk answer of {} bytes exceeds its buffer of {length}",
                        c.number,
                        c.data.len()
                    ),
                ));
            }
            Ok(Op::Call(Recorded::BulkIn {
                endpoint: s.ep,
                length,
                answer: Ok(c.data.to_vec()),
            }))
        }
        XFER_BULK => {
            if s.cut {
                return Err(cut(s));
            }
            if c.status != 0 {
                return Ok(Op::Failed {
                    text: format!(
                        "packet {}: {} failed with status {} ({})",
                        c.number,
                        Call::BulkOut {
                            endpoint: s.ep,
                            data: s.data
                        },
                        c.status,
                        errno_name(c.status)
                    ),
                    frame: true,
                });
            }
            Ok(Op::Call(Recorded::BulkOut {
                endpoint: s.ep,
                data: s.data.to_vec(),
            }))
        }
        other => Ok(Op::Skipped(format!(
            "packet {}: {} transfer on endpoint {:02x} left out",
            s.number,
            match other {
                0 => "isochronous",
                1 => "interrupt",
                _ => "unknown",
            },
            s.ep
        ))),
    }
}

/// The chest board's product in its device descriptor.
const CHEST_IDS: (u16, u16) = (0xffff, 0x0006);

/// The devices of the chest board in the capture, in the order they were
/// recognised: the one named, else every device number on the bus of the
/// first that either sends the protocol's vendor requests or answers the
/// kernel's GET_DESCRIPTOR (device) with `ffff:0006` at enumeration. A
/// board that re-enumerates (USB reset, replug) gets a new device number;
/// its enumeration names it again, so the import follows it.
fn chest_devices(events: &[Event<'_>], opts: &ImportOptions) -> Vec<(u16, u8)> {
    if let Some(d) = opts.device {
        return vec![d];
    }
    let mut found: Vec<(u16, u8)> = Vec::new();
    // GET_DESCRIPTOR (device) submissions waiting for their answer.
    let mut asked: HashMap<(u16, u8, u64), ()> = HashMap::new();
    for e in events {
        // Device 0 is every device before SET_ADDRESS.
        if e.dev == 0 || found.contains(&(e.bus, e.dev)) {
            continue;
        }
        if found.first().is_some_and(|f| f.0 != e.bus) {
            continue;
        }
        let key = (e.bus, e.dev, e.id);
        let chest = match (e.kind, e.xfer) {
            (b'S', XFER_CONTROL) => match e.setup {
                Some(s) if is_spec_vendor_request(&s) => true,
                Some([0x80, 0x06, _, 0x01, ..]) => {
                    asked.insert(key, ());
                    false
                }
                _ => false,
            },
            (b'C', XFER_CONTROL) if asked.remove(&key).is_some() => {
                e.status == 0
                    && e.data.len() >= 12
                    && (
                        u16::from_le_bytes([e.data[8], e.data[9]]),
                        u16::from_le_bytes([e.data[10], e.data[11]]),
                    ) == CHEST_IDS
            }
            _ => false,
        };
        if chest {
            found.push((e.bus, e.dev));
        }
    }
    found
}

/// The seq of a frame: `a5`, then seq u16 little endian.
fn frame_seq(data: &[u8]) -> Option<u16> {
    match data {
        [0xa5, lo, hi, ..] => Some(u16::from_le_bytes([*lo, *hi])),
        _ => None,
    }
}

/// Imports a usbmon capture, with counts and warnings.
pub fn import(bytes: &[u8], opts: &ImportOptions) -> Result<Import, ImportError> {
    let mut warnings = Vec::new();
    let packets = packets(bytes, &mut warnings)?;
    let mut events = Vec::with_capacity(packets.len());
    for p in &packets {
        events.push(event(p)?);
    }
    let devices = chest_devices(&events, opts);
    let Some(&device) = devices.first() else {
        return Err(err(
            bytes.len(),
            "no chest board traffic found: no device sent the protocol's vendor requests (40/c0, \
             bRequest 01..05) or described itself as ffff:0006; name the device with --device \
             BUS:DEV (lsusb shows both)",
        ));
    };
    let mine: Vec<&Event<'_>> = events
        .iter()
        .filter(|e| devices.contains(&(e.bus, e.dev)))
        .collect();
    if mine.is_empty() {
        return Err(err(
            bytes.len(),
            format!(
                "no event of bus {} device {} in the capture (check --device BUS:DEV)",
                device.0, device.1
            ),
        ));
    }
    if devices.len() > 1 {
        let list: Vec<String> = devices.iter().map(|d| d.1.to_string()).collect();
        warnings.push(format!(
            "the chest board re-enumerated: followed as device numbers {} of bus {}",
            list.join(", "),
            device.0
        ));
    }

    // Pair submissions with completions by device and URB id, in submission
    // order.
    let mut transfers: Vec<Transfer<'_>> = Vec::new();
    let mut pending: HashMap<(u8, u64), usize> = HashMap::new();
    for e in &mine {
        match e.kind {
            b'S' => {
                if let Some(i) = pending.insert((e.dev, e.id), transfers.len()) {
                    warnings.push(format!(
                        "packet {}: URB {:x} submitted again before the completion of packet {}",
                        e.number, e.id, transfers[i].submit.number
                    ));
                }
                transfers.push(Transfer { submit: **e, done: None });
            }
            b'C' | b'E' => match pending.remove(&(e.dev, e.id)) {
                Some(i) => transfers[i].done = Some(**e),
                None => warnings.push(format!(
                    "packet {}: a completion without its submission (the capture started mid-transfer; left out)",
                    e.number
                )),
            },
            k => {
                return Err(err(
                    e.offset + 8,
                    format!("packet {}: unknown usbmon event type {:?} (expected S, C or E)", e.number, k as char),
                ))
            }
        }
    }
    let mut ops = Vec::with_capacity(transfers.len());
    for t in &transfers {
        let s = &t.submit;
        ops.push(Timed {
            op: op_of(t, &mut warnings)?,
            ts_us: s.ts_us,
            number: s.number,
            seq: (s.xfer == XFER_BULK && s.ep & 0x80 == 0)
                .then(|| frame_seq(s.data))
                .flatten(),
        });
    }
    let bounds = segment_starts(&ops);
    let mut segments = Vec::with_capacity(bounds.len());
    for (n, &start) in bounds.iter().enumerate() {
        let end = bounds.get(n + 1).copied().unwrap_or(ops.len());
        let global = if n == 0 { warnings.as_slice() } else { &[] };
        segments.push(render(&ops[start..end], n, device, opts, global)?);
    }
    // No op at all (a device with only events the pairing dropped): one
    // empty segment, as before segments.
    if segments.is_empty() {
        segments.push(render(&[], 0, device, opts, &warnings)?);
    }
    for s in &segments {
        warnings.extend(s.notes.iter().cloned());
    }
    Ok(Import {
        text: segments[0].text.clone(),
        device,
        devices,
        calls: segments.iter().map(|s| s.calls).sum(),
        cycles: segments.iter().map(|s| s.cycles).sum(),
        warnings,
        segments,
    })
}

fn io_err(e: std::io::Error) -> ImportError {
    err(0, format!("writing the recording failed: {e}"))
}

const START: (u8, u8) = (0x40, 0x01);
const CLIENT_STATE: (u8, u8) = (0x40, 0x05);
const PREFS: (u8, u8) = (0xc0, 0x03);

fn is_frame(op: &Op) -> bool {
    matches!(
        op,
        Op::Call(Recorded::BulkOut { .. }) | Op::Failed { frame: true, .. }
    )
}

fn is_bulk(op: &Op) -> bool {
    is_frame(op) || matches!(op, Op::Call(Recorded::BulkIn { .. }))
}

/// Where sessions start: index 0, and every frame with seq 0 after a frame
/// (a program's first start-up frame: `docs/protocol.md` section 5 never
/// resets seq, not even at a reconnect, so seq 0 again is a new program: HAL
/// restarted), moved back over the transfers of its start-up (everything
/// after the last bulk transfer before it).
fn segment_starts(ops: &[Timed]) -> Vec<usize> {
    let mut starts = Vec::new();
    if !ops.is_empty() {
        starts.push(0);
    }
    let mut seen_frame = false;
    for (i, t) in ops.iter().enumerate() {
        if !is_frame(&t.op) {
            continue;
        }
        if seen_frame && t.seq == Some(0) {
            let floor = starts.last().copied().unwrap_or(0);
            let mut s = i;
            while s > floor + 1 && !is_bulk(&ops[s - 1].op) {
                s -= 1;
            }
            starts.push(s);
        }
        seen_frame = true;
    }
    starts
}

/// Where cycles start: for each op index, the index of the cycle's frame
/// when a `cycle` line goes before it.
fn cycle_starts(ops: &[Timed]) -> Vec<Option<usize>> {
    let mut starts = vec![None; ops.len()];
    let mut startup_frames_left = 0u8;
    let mut seen_frame = false;
    let mut seen_set_config = false;
    let mut startup_answer = vec![false; ops.len()];
    for i in 0..ops.len() {
        match &ops[i].op {
            Op::Call(Recorded::SetConfiguration(_)) if !seen_set_config && !seen_frame => {
                seen_set_config = true;
                startup_frames_left = 2;
            }
            op if is_frame(op) => {
                seen_frame = true;
                if startup_frames_left > 0 {
                    startup_frames_left -= 1;
                    if matches!(
                        ops.get(i + 1).map(|t| &t.op),
                        Some(Op::Call(Recorded::BulkIn { .. }))
                    ) {
                        startup_answer[i + 1] = true;
                    }
                    continue;
                }
                let mut j = i;
                if j > 0
                    && matches!(ops[j - 1].op, Op::Call(Recorded::BulkIn { .. }))
                    && !startup_answer[j - 1]
                {
                    j -= 1;
                }
                if j > 0 {
                    if let Op::Call(Recorded::ControlOut { setup, .. }) = ops[j - 1].op {
                        if (setup.request_type, setup.request) == CLIENT_STATE {
                            j -= 1;
                        }
                    }
                }
                starts[j] = Some(i);
            }
            _ => {}
        }
    }
    starts
}

/// The joint zero positions of the preference block the segment's start-up
/// read (PREFS answers by offset), when it read a whole valid block.
fn zeros(ops: &[Timed]) -> Option<[u16; nao_wire::JOINTS]> {
    let mut block = vec![0u8; PREFS_LEN];
    let mut have = vec![false; PREFS_LEN];
    for t in ops {
        if let Op::Call(Recorded::ControlIn { setup, answer, .. }) = &t.op {
            if (setup.request_type, setup.request) == PREFS {
                let at = usize::from(setup.index);
                let end = at.checked_add(answer.len())?.min(PREFS_LEN);
                if at < end {
                    block[at..end].copy_from_slice(&answer[..end - at]);
                    have[at..end].iter_mut().for_each(|h| *h = true);
                }
            }
        }
    }
    if !have.iter().all(|&h| h) {
        return None;
    }
    Prefs::parse(&block).ok().map(|p| p.zero)
}

/// The command that makes the runtime build `frame`'s joint, LED and sonar
/// bytes, read back from the frame (`docs/usbmon.md`): stiffness per mille
/// / 1000, the position decoded with the joint's zero where the stiffness is
/// not 0 (else the slot is the measured position, whatever the command
/// says), the LEDs and sonar mode as sent (those a frame leaves out stay as
/// `held`). `None` when the frame is not a valid frame with both buses'
/// POSITIONS and STIFFNESS, or a stiffness above 1000 (which the runtime
/// never sends).
fn command_of_frame(
    data: &[u8],
    zero: &[u16; nao_wire::JOINTS],
    held: &Command,
) -> Option<Command> {
    let frame = Frame::parse(data, SYNC_FRAME).ok()?;
    let mut c = *held;
    let mut buses = [[None::<&[u8]>; 2]; 2];
    for m in frame.messages() {
        let bus = match m.address {
            0xf0 => Some(0),
            0xf1 => Some(1),
            _ => None,
        };
        match (bus, m.address, m.command, m.payload) {
            (Some(b), _, 0x10, p) => buses[b][0] = Some(p),
            (Some(b), _, 0x11, p) => buses[b][1] = Some(p),
            (None, 0x04, 0x30, &[r, g, b]) => c.chest_led = [r, g, b],
            (None, 0x1d, 0x31, &[r, g, b]) => c.left_foot_led = [r, g, b],
            (None, 0x1e, 0x31, &[r, g, b]) => c.right_foot_led = [r, g, b],
            (None, 0x03, 0x32, &[mode]) => c.sonar_mode = mode,
            _ => {}
        }
    }
    for (b, bus) in [Bus::A, Bus::B].into_iter().enumerate() {
        let slots = bus.slots();
        let (Some(pos), Some(stiff)) = (buses[b][0], buses[b][1]) else {
            return None;
        };
        if pos.len() != slots.len() * 2 || stiff.len() != slots.len() * 2 {
            return None;
        }
        for (n, &j) in slots.iter().enumerate() {
            let s = u16::from_le_bytes([stiff[2 * n], stiff[2 * n + 1]]);
            let count = u16::from_le_bytes([pos[2 * n], pos[2 * n + 1]]);
            if s > 1000 {
                return None;
            }
            c.stiffness[j] = f32::from(s) / 1000.0;
            c.position[j] = if s > 0 {
                decode_position(count, zero[j])
            } else {
                0.0
            };
        }
    }
    Some(c)
}

/// A session's time 0: its first transfer's submission.
fn t0_of(ops: &[Timed]) -> i64 {
    ops.first().map_or(0, |t| t.ts_us)
}

/// Whether a frame sends any stiffness above 0.
fn frame_stiff(data: &[u8]) -> bool {
    Frame::parse(data, SYNC_FRAME).is_ok_and(|f| {
        f.messages().any(|m| {
            matches!(m.address, 0xf0 | 0xf1)
                && m.command == 0x11
                && m.payload.chunks(2).any(|c| c.iter().any(|&b| b != 0))
        })
    })
}

/// The battery current in an answer, if it holds the battery's READ answer.
fn battery_current(answer: &[u8]) -> Option<i16> {
    let a = Frame::parse(answer, 0x5a).ok()?;
    a.messages()
        .find_map(|m| match (m.address, m.command, m.payload) {
            (0x02, 0x81, [_, _, lo, hi, ..]) => Some(i16::from_le_bytes([*lo, *hi])),
            _ => None,
        })
}

/// Where a stiffness read back from HAL's frames stops being the stiffness
/// nao-rs is to be commanded. HAL's frames carry the stiffness after its
/// safety levels (`docs/protocol.md` section 9), and nao-rs applies its own
/// again: neutral while every level is 1000 (the controller-lost level
/// stays 1000: a command every cycle) or the frame sends no stiffness. So
/// the compared part ends at the first cycle that sends a stiffness while
/// nao-rs's stall level (from the `cycle` lines' times) or over-current
/// level (from the battery currents of the answers read in the cycles
/// before: an answer is handed over after the cycle's write) is below 1000,
/// computed by nao-rs's own safety state machine. The cut: the op index of its cycle's
/// start, and why.
fn level_cut(ops: &[Timed], starts: &[Option<usize>], t0: i64) -> Option<(usize, String)> {
    // nao-rs's own safety state machine, with a command every cycle.
    let mut safety = Safety::new();
    let mut last: Option<u64> = None;
    let mut latest = 0i16;
    let mut k = 0u64;
    for (j, t) in ops.iter().enumerate() {
        if let Some(frame) = starts[j] {
            let t_ms = (t.ts_us.saturating_sub(t0).max(0) / 1000) as u64;
            let t_ms = last.map_or(t_ms, |l| l.max(t_ms));
            last = Some(t_ms);
            let levels = safety.step(t_ms.saturating_mul(1_000_000), true, latest);
            let stiff = matches!(&ops[frame].op, Op::Call(Recorded::BulkOut { data, .. }) if frame_stiff(data));
            if stiff && levels.stall < 1000 {
                return Some((
                    j,
                    format!(
                        "cycle {k}: nao-rs's stall level is {} (after a cycle stall: more than \
                         100 ms between two cycles): the stiffness in HAL's frames holds HAL's \
                         stall level, which nao-rs would apply again",
                        levels.stall
                    ),
                ));
            }
            if stiff && levels.overcurrent < 1000 {
                return Some((
                    j,
                    format!(
                        "cycle {k}: nao-rs's over-current level is {} (the battery reported \
                         {latest} mA, above 4500): the stiffness in HAL's frames holds HAL's \
                         over-current level, which nao-rs would apply again",
                        levels.overcurrent
                    ),
                ));
            }
            k += 1;
        }
        if let Op::Call(Recorded::BulkIn { answer: Ok(a), .. }) = &t.op {
            if let Some(ma) = battery_current(a) {
                latest = ma;
            }
        }
    }
    None
}

/// One session of the capture: from its first transfer to the next
/// program's start-up (a HAL restart) or the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its recording: the comparable part as call lines, the rest as
    /// `# not compared:` comments.
    pub text: String,
    /// The packet number of its first transfer (1-based; 0 for an empty
    /// capture).
    pub first_packet: usize,
    /// Whether it holds its start-up (a `set_configuration` before its first
    /// frame): only then can a replay from its start match.
    pub startup: bool,
    /// Call lines written.
    pub calls: usize,
    /// `cycle` lines written.
    pub cycles: usize,
    /// `bulk_out` lines written (the frames a replay compares).
    pub frames: usize,
    /// `command` lines read back from the frames.
    pub commands: usize,
    /// Cycles whose command could not be read back (their frame is not a
    /// valid frame, or the start-up's preference block is missing).
    pub commands_unread: usize,
    /// What of this segment is not compared, and why (also comments in
    /// `text`).
    pub notes: Vec<String>,
}

impl Segment {
    /// Whether a replay of `text` from its start can compare frames.
    pub fn comparable(&self) -> bool {
        self.startup && self.frames > 0
    }
}

/// Writes one segment's recording.
fn render(
    ops: &[Timed],
    n: usize,
    device: (u16, u8),
    opts: &ImportOptions,
    warnings: &[String],
) -> Result<Segment, ImportError> {
    let starts = if opts.cycles {
        cycle_starts(ops)
    } else {
        vec![None; ops.len()]
    };
    let mut notes = Vec::new();
    let first_frame = ops.iter().position(|t| is_frame(&t.op));
    let startup = ops[..first_frame.unwrap_or(ops.len())]
        .iter()
        .any(|t| matches!(t.op, Op::Call(Recorded::SetConfiguration(_))));
    let cycle_count = starts.iter().filter(|s| s.is_some()).count();
    // Where the comparable part ends: after the last cycle's frame (what
    // follows is the program stopping), and before the cycle holding the
    // first transfer the format cannot hold.
    let mut end = ops.len();
    if opts.cycles {
        if let Some(last) = starts.iter().filter_map(|s| *s).max() {
            end = last + 1;
        }
    }
    // The cycle start at or before op `i` (in the start-up: `i` itself).
    let cycle_of = |i: usize| (0..=i).rev().find(|&j| starts[j].is_some()).unwrap_or(i);
    let mut cuts: Vec<(usize, String)> = Vec::new();
    let failed = ops[..end]
        .iter()
        .enumerate()
        .find_map(|(i, t)| match &t.op {
            Op::Failed { text, .. } => Some((i, text)),
            _ => None,
        });
    if let Some((f, text)) = failed {
        cuts.push((
            cycle_of(f),
            format!(
                "{text}: the recording format cannot hold a failed transfer (docs/recording.md)"
            ),
        ));
    }
    if opts.commands {
        cuts.extend(level_cut(&ops[..end], &starts, t0_of(ops)));
    }
    if let Some((cut, why)) = cuts.into_iter().min_by_key(|c| c.0) {
        let lost = ops[cut..].iter().filter(|t| is_frame(&t.op)).count();
        notes.push(format!(
            "{why}, so this session's {lost} frames from there on are not compared"
        ));
        end = cut;
    }
    let trailing = ops[end..]
        .iter()
        .filter(|t| matches!(t.op, Op::Call(_)))
        .count();
    if trailing > 0 && notes.is_empty() {
        notes.push(format!(
            "{trailing} transfers after the last whole cycle (the program stopping) are not compared"
        ));
    }
    let zero = if opts.commands {
        zeros(&ops[..end])
    } else {
        None
    };
    if opts.commands && startup && zero.is_none() && cycle_count > 0 {
        notes.push(
            "no whole, valid preference block in this session's start-up: its commands cannot be \
             read back from its frames"
                .into(),
        );
    }

    let mut w = RecordingWriter::new(Vec::with_capacity(ops.len() * 600 + 256)).map_err(io_err)?;
    w.comment(&format!(
        "imported from a usbmon capture: bus {} device {}; open, claim_interface and close are not \
         USB transfers and are written by convention (docs/usbmon.md)",
        device.0, device.1
    ))
    .map_err(io_err)?;
    if n > 0 || ops.first().is_some_and(|t| t.number > 1) {
        w.comment(&format!(
            "session {} of the capture, from packet {}",
            n + 1,
            ops.first().map_or(0, |t| t.number)
        ))
        .map_err(io_err)?;
    }
    if let Some(a) = &opts.accepted {
        w.accepted(a).map_err(io_err)?;
    }
    if let Some(armed) = opts.switch_armed {
        w.switch(armed).map_err(io_err)?;
    }
    w.open(CHEST_IDS.0, CHEST_IDS.1).map_err(io_err)?;
    let mut calls = 1usize;
    let mut cycles = 0usize;
    let mut frames = 0usize;
    let mut commands = 0usize;
    let mut commands_unread = 0usize;
    let mut held = Command::default();
    let t0 = t0_of(ops);
    let mut last_t = 0u64;
    let mut set_configs = 0usize;
    let mut claim_pending = false;
    for (i, t) in ops[..end].iter().enumerate() {
        if claim_pending {
            let is_start = matches!(
                &t.op,
                Op::Call(Recorded::ControlOut { setup, .. })
                    if (setup.request_type, setup.request) == START
            );
            let is_note = matches!(&t.op, Op::Skipped(_));
            if !is_start && !is_note {
                w.claim_interface(0).map_err(io_err)?;
                calls += 1;
                claim_pending = false;
            }
        }
        if let Some(frame) = starts[i] {
            let t_ms = (t.ts_us.saturating_sub(t0).max(0) / 1000) as u64;
            last_t = last_t.max(t_ms);
            w.cycle(cycles as u64, last_t).map_err(io_err)?;
            cycles += 1;
            if let Some(zero) = &zero {
                let read = match &ops[frame].op {
                    Op::Call(Recorded::BulkOut { data, .. }) => command_of_frame(data, zero, &held),
                    _ => None,
                };
                match read {
                    Some(c) => {
                        w.command(&c).map_err(io_err)?;
                        held = c;
                        commands += 1;
                    }
                    None => {
                        commands_unread += 1;
                        w.comment("the command of this cycle's frame cannot be read back")
                            .map_err(io_err)?;
                    }
                }
            }
        }
        match &t.op {
            Op::Call(call) => {
                match call {
                    Recorded::SetConfiguration(_) => {
                        if set_configs > 0 {
                            w.close().map_err(io_err)?;
                            w.open(CHEST_IDS.0, CHEST_IDS.1).map_err(io_err)?;
                            calls += 2;
                        }
                        set_configs += 1;
                        claim_pending = true;
                    }
                    Recorded::BulkOut { .. } => frames += 1,
                    _ => {}
                }
                w.recorded(call).map_err(io_err)?;
            }
            Op::Failed { text, .. } => {
                w.comment(&format!("failed: {text}")).map_err(io_err)?;
                continue;
            }
            Op::Skipped(text) => {
                w.comment(&format!("skipped: {text}")).map_err(io_err)?;
                continue;
            }
        }
        calls += 1;
    }
    if claim_pending {
        w.claim_interface(0).map_err(io_err)?;
        calls += 1;
    }
    for t in &ops[end..] {
        match &t.op {
            Op::Call(call) => w.comment(&format!("not compared: {call}")),
            Op::Failed { text, .. } => w.comment(&format!("not compared: failed: {text}")),
            Op::Skipped(text) => w.comment(&format!("skipped: {text}")),
        }
        .map_err(io_err)?;
    }
    if !startup {
        notes.push(if n == 0 {
            "no set_configuration in the capture before its first frame: it started after the \
             start-up, so a replay from the start cannot match"
                .into()
        } else {
            format!(
                "session {} holds no start-up: a replay from its start cannot match",
                n + 1
            )
        });
    }
    for note in warnings.iter().chain(&notes) {
        w.comment(&format!("warning: {note}")).map_err(io_err)?;
    }
    let text = String::from_utf8(w.into_inner()).map_err(|e| err(0, e.to_string()))?;
    Ok(Segment {
        text,
        first_packet: ops.first().map_or(0, |t| t.number),
        startup,
        calls,
        cycles,
        frames,
        commands,
        commands_unread,
        notes,
    })
}
