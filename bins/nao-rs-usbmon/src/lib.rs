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
use nao_wire::recording::{Recorded, RecordingWriter};

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
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            device: None,
            cycles: true,
            accepted: None,
            switch_armed: None,
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
    /// The recording text.
    pub text: String,
    /// The chest board's (bus, device number).
    pub device: (u16, u8),
    /// Call lines written.
    pub calls: usize,
    /// `cycle` lines written.
    pub cycles: usize,
    /// Things left out or odd, also written as comments into the text.
    pub warnings: Vec<String>,
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

struct Timed {
    op: Op,
    ts_us: i64,
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

/// Imports a usbmon capture, with counts and warnings.
pub fn import(bytes: &[u8], opts: &ImportOptions) -> Result<Import, ImportError> {
    let mut warnings = Vec::new();
    let packets = packets(bytes, &mut warnings)?;
    let mut events = Vec::with_capacity(packets.len());
    for p in &packets {
        events.push(event(p)?);
    }
    let device = match opts.device {
        Some(d) => d,
        None => events
            .iter()
            .find(|e| e.kind == b'S' && e.xfer == XFER_CONTROL && e.setup.is_some_and(|s| is_spec_vendor_request(&s)))
            .map(|e| (e.bus, e.dev))
            .ok_or_else(|| {
                err(
                    bytes.len(),
                    "no chest board traffic found: no device sent the protocol's vendor requests (40/c0, \
                     bRequest 01..05); name the device with --device BUS:DEV (lsusb shows both)",
                )
            })?,
    };
    let mine: Vec<&Event<'_>> = events.iter().filter(|e| (e.bus, e.dev) == device).collect();
    if mine.is_empty() {
        return Err(err(
            bytes.len(),
            format!(
                "no event of bus {} device {} in the capture (check --device BUS:DEV)",
                device.0, device.1
            ),
        ));
    }
    let t0 = mine[0].ts_us;

    // Pair submissions with completions by URB id, in submission order.
    let mut transfers: Vec<Transfer<'_>> = Vec::new();
    let mut pending: HashMap<u64, usize> = HashMap::new();
    for e in &mine {
        match e.kind {
            b'S' => {
                if let Some(i) = pending.insert(e.id, transfers.len()) {
                    warnings.push(format!(
                        "packet {}: URB {:x} submitted again before the completion of packet {}",
                        e.number, e.id, transfers[i].submit.number
                    ));
                }
                transfers.push(Transfer { submit: **e, done: None });
            }
            b'C' | b'E' => match pending.remove(&e.id) {
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
        ops.push(Timed {
            op: op_of(t, &mut warnings)?,
            ts_us: t.submit.ts_us,
        });
    }
    render(ops, device, t0, opts, warnings)
}

fn io_err(e: std::io::Error) -> ImportError {
    err(0, format!("writing the recording failed: {e}"))
}

const START: (u8, u8) = (0x40, 0x01);
const CLIENT_STATE: (u8, u8) = (0x40, 0x05);

/// Where cycles start: for each op index, whether a `cycle` line goes before
/// it.
fn cycle_starts(ops: &[Timed]) -> Vec<bool> {
    let mut starts = vec![false; ops.len()];
    let mut startup_frames_left = 0u8;
    let mut seen_frame = false;
    let mut seen_set_config = false;
    let mut startup_answer = vec![false; ops.len()];
    let is_frame = |op: &Op| {
        matches!(
            op,
            Op::Call(Recorded::BulkOut { .. }) | Op::Failed { frame: true, .. }
        )
    };
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
                starts[j] = true;
            }
            _ => {}
        }
    }
    starts
}

fn render(
    ops: Vec<Timed>,
    device: (u16, u8),
    t0: i64,
    opts: &ImportOptions,
    mut warnings: Vec<String>,
) -> Result<Import, ImportError> {
    let starts = if opts.cycles {
        cycle_starts(&ops)
    } else {
        vec![false; ops.len()]
    };
    let mut w = RecordingWriter::new(Vec::with_capacity(ops.len() * 600 + 256)).map_err(io_err)?;
    w.comment(&format!(
        "imported from a usbmon capture: bus {} device {}; open, claim_interface and close are not \
         USB transfers and are written by convention (docs/usbmon.md)",
        device.0, device.1
    ))
    .map_err(io_err)?;
    if let Some(a) = &opts.accepted {
        w.accepted(a).map_err(io_err)?;
    }
    if let Some(armed) = opts.switch_armed {
        w.switch(armed).map_err(io_err)?;
    }
    w.open(0xffff, 0x0006).map_err(io_err)?;
    let mut calls = 1usize;
    let mut cycles = 0usize;
    let mut last_t = 0u64;
    let mut set_configs = 0usize;
    let mut claim_pending = false;
    for (i, t) in ops.iter().enumerate() {
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
        if starts[i] {
            let t_ms = (t.ts_us.saturating_sub(t0).max(0) / 1000) as u64;
            last_t = last_t.max(t_ms);
            w.cycle(cycles as u64, last_t).map_err(io_err)?;
            cycles += 1;
        }
        match &t.op {
            Op::Call(call) => {
                if let Recorded::SetConfiguration(_) = call {
                    if set_configs > 0 {
                        w.close().map_err(io_err)?;
                        w.open(0xffff, 0x0006).map_err(io_err)?;
                        calls += 2;
                    }
                    set_configs += 1;
                    claim_pending = true;
                }
                w.recorded(call).map_err(io_err)?;
            }
            Op::Failed { text, .. } => {
                warnings.push(format!(
                    "{text} (the format cannot hold it; written as a comment)"
                ));
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
    if set_configs == 0 {
        warnings.push(
            "no set_configuration in the capture: it started after the start-up, so a replay from \
             the start cannot match"
                .into(),
        );
    }
    for warning in &warnings {
        w.comment(&format!("warning: {warning}")).map_err(io_err)?;
    }
    let text = String::from_utf8(w.into_inner()).map_err(|e| err(0, e.to_string()))?;
    Ok(Import {
        text,
        device,
        calls,
        cycles,
        warnings,
    })
}
