//! The request codec of the virtual robot's Unix socket: how a [`Call`]
//! and its reply travel between [`super::sim::SimLink`] and `nao-rs-sim`.
//!
//! Every request and every reply is one message: a `u32` little-endian body
//! length, then the body. A request body is an op byte and its fields
//! (little endian); a reply body is a status byte and its data:
//!
//! | op | call | fields |
//! |---|---|---|
//! | 1 | open | vendor u16, product u16 |
//! | 2 | set_configuration | config u8 |
//! | 3 | claim_interface | iface u8 |
//! | 4 | close | none |
//! | 5 | control_out | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, data |
//! | 6 | control_in | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, wLength u16 |
//! | 7 | bulk_out | endpoint u8, data |
//! | 8 | bulk_in | endpoint u8, buffer length u16 |
//!
//! Status: 0 ok, 1 timeout, 2 pipe, 3 no device, 4 busy, 5 other (the data is
//! a UTF-8 message). The data of an ok reply: none for open, set_configuration,
//! claim_interface and close; the transferred length as `u32` for control_out
//! and bulk_out; the bytes read for control_in and bulk_in.
//!
//! Both ends use this module, so the encoding exists once: the link
//! ([`super::sim::SimLink`]) writes a request with [`message`] and
//! `encode_request`, reads the reply with [`read_message`] and decodes it
//! with `decode_reply`; the simulator (`nao-rs-sim`) reads a request with
//! [`read_message`], decodes it with [`decode_request`] and writes its reply
//! with [`message`] and [`encode_reply`].

use std::io::{self, Read};

use super::{answer_buf, Call, LinkError, Setup};
use crate::protocol::tables::byte_enum;

byte_enum! {
    /// The op byte of a request body.
    enum RequestOp {
        /// open (vendor u16, product u16).
        Open = 1,
        /// set_configuration (config u8).
        SetConfiguration = 2,
        /// claim_interface (iface u8).
        ClaimInterface = 3,
        /// close.
        Close = 4,
        /// control_out (bmRequestType, bRequest, wValue, wIndex, data).
        ControlOut = 5,
        /// control_in (bmRequestType, bRequest, wValue, wIndex, wLength).
        ControlIn = 6,
        /// bulk_out (endpoint, data).
        BulkOut = 7,
        /// bulk_in (endpoint, buffer length u16).
        BulkIn = 8,
    }
}

byte_enum! {
    /// The status byte of a reply body.
    enum ReplyStatus {
        /// ok.
        Ok = 0,
        /// The transfer timed out.
        Timeout = 1,
        /// The endpoint stalled.
        Pipe = 2,
        /// No device (unplugged, or the handle is stale).
        NoDevice = 3,
        /// Another connection holds interface 0.
        Busy = 4,
        /// Another error; the data is a UTF-8 message.
        Other = 5,
    }
}

/// The largest message body either side accepts (a 64 KiB control transfer
/// and its header fit).
pub(crate) const MAX_BODY: usize = 70_000;

/// The reply status of an error kind.
fn status(e: LinkError) -> ReplyStatus {
    match e {
        LinkError::Timeout => ReplyStatus::Timeout,
        LinkError::Pipe => ReplyStatus::Pipe,
        LinkError::NoDevice => ReplyStatus::NoDevice,
        LinkError::Busy => ReplyStatus::Busy,
        LinkError::Mismatch | LinkError::Other => ReplyStatus::Other,
    }
}

/// The error kind of a reply status byte other than ok (the inverse of
/// [`status`]; an unknown status is [`LinkError::Other`]).
fn error(status: u8) -> LinkError {
    match ReplyStatus::try_from(status) {
        Ok(ReplyStatus::Timeout) => LinkError::Timeout,
        Ok(ReplyStatus::Pipe) => LinkError::Pipe,
        Ok(ReplyStatus::NoDevice) => LinkError::NoDevice,
        Ok(ReplyStatus::Busy) => LinkError::Busy,
        _ => LinkError::Other,
    }
}

/// Appends one message to `out`: the length prefix, then the body that
/// `body` appends ([`encode_request`] or [`encode_reply`], which write
/// bodies only). Allocates only if `out` must grow.
pub fn message(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Reads one message from `r` and puts its body (without the length
/// prefix) in `body`; `what` names it (`request`, `reply`) in the error.
///
/// # Errors
///
/// The read's error; [`io::ErrorKind::InvalidData`] for a body length
/// outside 1..=70,000.
pub fn read_message(r: &mut impl Read, body: &mut Vec<u8>, what: &str) -> io::Result<()> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_BODY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} body of {len} bytes (expected 1..={MAX_BODY})"),
        ));
    }
    body.resize(len, 0);
    r.read_exact(body)
}

fn put_setup(out: &mut Vec<u8>, s: &Setup) {
    out.extend_from_slice(&[s.request_type, s.request]);
    out.extend_from_slice(&s.value.to_le_bytes());
    out.extend_from_slice(&s.index.to_le_bytes());
}

/// Why a call cannot be encoded: a control transfer or `bulk_in` length
/// above 65535, or a transfer too large for [`MAX_BODY`].
pub(crate) fn check_request(call: &Call<'_>) -> Result<(), &'static str> {
    match *call {
        Call::ControlOut { data, .. } if data.len() > usize::from(u16::MAX) => {
            Err("control_out of more than 65535 bytes")
        }
        Call::BulkOut { data, .. } if data.len() > MAX_BODY - 16 => {
            Err("bulk_out larger than the virtual robot takes (70000 - 16 bytes)")
        }
        _ => Ok(()),
    }
}

/// Appends the request body of `call` (the link wraps it with its
/// length prefix to send it). A `bulk_in` buffer longer than 65535 asks for 65535 bytes.
pub(crate) fn encode_request(call: &Call<'_>, b: &mut Vec<u8>) {
    match *call {
        Call::Open { vendor, product } => {
            b.push(RequestOp::Open.into());
            b.extend_from_slice(&vendor.to_le_bytes());
            b.extend_from_slice(&product.to_le_bytes());
        }
        Call::SetConfiguration(n) => b.extend_from_slice(&[RequestOp::SetConfiguration.into(), n]),
        Call::ClaimInterface(n) => b.extend_from_slice(&[RequestOp::ClaimInterface.into(), n]),
        Call::Close => b.push(RequestOp::Close.into()),
        Call::ControlOut { setup, data } => {
            b.push(RequestOp::ControlOut.into());
            put_setup(b, &setup);
            b.extend_from_slice(data);
        }
        Call::ControlIn { setup, length } => {
            b.push(RequestOp::ControlIn.into());
            put_setup(b, &setup);
            b.extend_from_slice(&length.to_le_bytes());
        }
        Call::BulkOut { endpoint, data } => {
            b.extend_from_slice(&[RequestOp::BulkOut.into(), endpoint]);
            b.extend_from_slice(data);
        }
        Call::BulkIn { endpoint, length } => {
            let length = u16::try_from(length).unwrap_or(u16::MAX);
            b.extend_from_slice(&[RequestOp::BulkIn.into(), endpoint]);
            b.extend_from_slice(&length.to_le_bytes());
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn setup_at(b: &[u8]) -> Option<Setup> {
    Some(Setup {
        request_type: *b.get(1)?,
        request: *b.get(2)?,
        value: u16_at(b, 3)?,
        index: u16_at(b, 5)?,
    })
}

/// The call of a request body (the message without its length prefix).
/// Bytes after a call's fields are its data (control_out, bulk_out) or
/// ignored. Never panics.
///
/// # Errors
///
/// Why the body is malformed: empty, an unknown op, missing fields.
pub fn decode_request(body: &[u8]) -> Result<Call<'_>, String> {
    let short = |what: &str| format!("{what}: request of {} bytes is too short", body.len());
    let Some(&op) = body.first() else {
        return Err("empty request".into());
    };
    let op = RequestOp::try_from(op).map_err(|op| format!("unknown op {op} (expected 1..=8)"))?;
    Ok(match op {
        RequestOp::Open => Call::Open {
            vendor: u16_at(body, 1).ok_or_else(|| short("open"))?,
            product: u16_at(body, 3).ok_or_else(|| short("open"))?,
        },
        RequestOp::SetConfiguration => {
            Call::SetConfiguration(*body.get(1).ok_or_else(|| short("set_configuration"))?)
        }
        RequestOp::ClaimInterface => {
            Call::ClaimInterface(*body.get(1).ok_or_else(|| short("claim_interface"))?)
        }
        RequestOp::Close => Call::Close,
        RequestOp::ControlOut => Call::ControlOut {
            setup: setup_at(body).ok_or_else(|| short("control_out"))?,
            data: &body[7..],
        },
        RequestOp::ControlIn => Call::ControlIn {
            setup: setup_at(body).ok_or_else(|| short("control_in"))?,
            length: u16_at(body, 7).ok_or_else(|| short("control_in"))?,
        },
        RequestOp::BulkOut => Call::BulkOut {
            endpoint: *body.get(1).ok_or_else(|| short("bulk_out"))?,
            data: &body[2..],
        },
        RequestOp::BulkIn => Call::BulkIn {
            endpoint: *body.get(1).ok_or_else(|| short("bulk_in"))?,
            length: u16_at(body, 2).ok_or_else(|| short("bulk_in"))?.into(),
        },
    })
}

/// Appends the reply body of `call` whose result was `reply`: for
/// `Ok(n)`, the length `n` an OUT call transferred, or the `n` bytes an IN
/// call read (the start of `answer`); for an error, its status and, for
/// [`LinkError::Other`] and [`LinkError::Mismatch`] (status 5), its text.
pub fn encode_reply(
    call: &Call<'_>,
    reply: Result<usize, (LinkError, &str)>,
    answer: &[u8],
    b: &mut Vec<u8>,
) {
    match reply {
        Ok(n) => {
            b.push(ReplyStatus::Ok.into());
            match call {
                Call::ControlOut { .. } | Call::BulkOut { .. } => {
                    b.extend_from_slice(&(n as u32).to_le_bytes())
                }
                Call::ControlIn { .. } | Call::BulkIn { .. } => {
                    b.extend_from_slice(&answer[..n.min(answer.len())])
                }
                _ => {}
            }
        }
        Err((e, text)) => {
            b.push(status(e).into());
            if status(e) == ReplyStatus::Other {
                b.extend_from_slice(text.as_bytes());
            }
        }
    }
}

/// The result of `call` from its reply body (the message without its
/// length prefix): the length an OUT call sent, or the bytes an IN call read
/// copied into the start of `answer` (at least [`Call::answer_len`] bytes
/// long).
///
/// # Errors
///
/// The kind and the message: the error status the simulator sent, with
/// its text (empty for most kinds); or [`LinkError::Other`] and why for a
/// malformed reply (empty, a transfer's length missing, more bytes than
/// asked) or an `answer` too short.
pub(crate) fn decode_reply<'r>(
    call: &Call<'_>,
    reply: &'r [u8],
    answer: &mut [u8],
) -> Result<usize, (LinkError, &'r str)> {
    let Some((&st, data)) = reply.split_first() else {
        return Err((LinkError::Other, "empty reply"));
    };
    if st != u8::from(ReplyStatus::Ok) {
        return Err((error(st), core::str::from_utf8(data).unwrap_or("")));
    }
    match call {
        Call::ControlOut { .. } | Call::BulkOut { .. } => match data {
            [a, b, c, d, ..] => Ok(u32::from_le_bytes([*a, *b, *c, *d]) as usize),
            _ => Err((LinkError::Other, "short reply to a transfer")),
        },
        Call::ControlIn { .. } | Call::BulkIn { .. } => {
            let buf = answer_buf(call, answer).map_err(|e| (e, "answer buffer too short"))?;
            let Some(to) = buf.get_mut(..data.len()) else {
                return Err((
                    LinkError::Other,
                    "more bytes returned than asked (overflow)",
                ));
            };
            to.copy_from_slice(data);
            Ok(data.len())
        }
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_link_errors_both_ways() {
        for e in [
            LinkError::Timeout,
            LinkError::Pipe,
            LinkError::NoDevice,
            LinkError::Busy,
            LinkError::Other,
        ] {
            assert_eq!(error(status(e).into()), e);
        }
        assert_eq!(error(77), LinkError::Other);
    }

    #[test]
    fn every_call_decodes_as_encoded() {
        let setup = Setup {
            request_type: 0xc0,
            request: 0x10,
            value: 0x0102,
            index: 0x0304,
        };
        let calls = [
            Call::Open {
                vendor: 0xffff,
                product: 6,
            },
            Call::SetConfiguration(1),
            Call::ClaimInterface(0),
            Call::Close,
            Call::ControlOut {
                setup,
                data: &[1, 2, 3],
            },
            Call::ControlIn { setup, length: 300 },
            Call::BulkOut {
                endpoint: 2,
                data: &[0xa5; 9],
            },
            Call::BulkIn {
                endpoint: 0x81,
                length: 1024,
            },
        ];
        let mut out = Vec::new();
        for c in calls {
            out.clear();
            message(&mut out, |b| encode_request(&c, b));
            let len = u32::from_le_bytes([out[0], out[1], out[2], out[3]]) as usize;
            assert_eq!(len, out.len() - 4);
            assert_eq!(decode_request(&out[4..]), Ok(c));
        }
        assert_eq!(decode_request(&[]), Err("empty request".into()));
        assert_eq!(
            decode_request(&[9]),
            Err("unknown op 9 (expected 1..=8)".into())
        );
        assert_eq!(
            decode_request(&[RequestOp::Open.into(), 1]),
            Err("open: request of 2 bytes is too short".into())
        );
    }

    #[test]
    fn replies_decode_as_encoded() {
        let bulk_in = Call::BulkIn {
            endpoint: 0x81,
            length: 4,
        };
        let mut out = Vec::new();
        encode_reply(&bulk_in, Ok(2), &[9, 8, 7], &mut out);
        let mut buf = [0u8; 4];
        assert_eq!(decode_reply(&bulk_in, &out, &mut buf), Ok(2));
        assert_eq!(buf[..2], [9, 8]);
        out.clear();
        encode_reply(&bulk_in, Ok(5), &[1; 5], &mut out);
        assert_eq!(
            decode_reply(&bulk_in, &out, &mut buf).map_err(|e| e.0),
            Err(LinkError::Other)
        );
        out.clear();
        encode_reply(&bulk_in, Err((LinkError::Other, "why")), &[], &mut out);
        assert_eq!(
            decode_reply(&bulk_in, &out, &mut buf),
            Err((LinkError::Other, "why"))
        );
        out.clear();
        encode_reply(&bulk_in, Err((LinkError::Busy, "ignored")), &[], &mut out);
        assert_eq!(out, [u8::from(ReplyStatus::Busy)]);
        let write = Call::BulkOut {
            endpoint: 2,
            data: &[1, 2, 3],
        };
        out.clear();
        encode_reply(&write, Ok(3), &[], &mut out);
        assert_eq!(decode_reply(&write, &out, &mut []), Ok(3));
    }

    #[test]
    fn read_message_takes_one_body_and_refuses_a_length_out_of_range() {
        let mut wire = Vec::new();
        message(&mut wire, |b| b.extend_from_slice(&[1, 2, 3]));
        message(&mut wire, |b| b.push(4));
        let mut r = &wire[..];
        let mut body = Vec::new();
        read_message(&mut r, &mut body, "reply").unwrap();
        assert_eq!(body, [1, 2, 3]);
        read_message(&mut r, &mut body, "reply").unwrap();
        assert_eq!(body, [4]);
        for len in [0u32, 70_001] {
            let e = read_message(&mut &len.to_le_bytes()[..], &mut body, "request").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e
                .to_string()
                .starts_with(&format!("request body of {len} bytes")));
        }
    }
}
