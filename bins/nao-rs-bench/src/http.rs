//! A tiny blocking HTTP/1.1 client over `std::net::TcpStream`, enough for
//! the app's `POST /api/stop-all` (the STOP ALL figure): one request per
//! connection (`Connection: close`), the answer read to its end. The parse
//! of the answer is pure.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code (200, 403, ...).
    pub status: u16,
    /// The body, after any chunked transfer coding is undone.
    pub body: Vec<u8>,
}

/// The request bytes of a `POST path` with no body to `addr`. The app
/// serves only requests naming an IP address or `localhost` in `Host`;
/// `x-nao-rs-app: 1` is the header the page sends (only the wake needs it).
pub fn post_request(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nx-nao-rs-app: 1\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Connects to `addr`, calls `before_write` (the bench takes its time 0
/// there, after the connection is made, as a page's open connection would
/// be), writes a `POST path` and reads the answer to the end. Every wait
/// has `timeout`.
pub fn post(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    before_write: impl FnOnce(),
) -> Result<Response, String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to the app's page at {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .and_then(|()| s.set_nodelay(true))
        .map_err(|e| format!("cannot set up the connection to {addr}: {e}"))?;
    let req = post_request(addr, path);
    before_write();
    s.write_all(&req)
        .map_err(|e| format!("cannot send POST {path} to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("no complete answer to POST {path} from {addr}: {e}"))?;
    parse_response(&raw).map_err(|e| format!("POST {path} to {addr}: {e}"))
}

/// The position of the first `\r\n\r\n` in `b`.
fn header_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Parses a whole HTTP/1.x answer: status line, headers, and the body by
/// `Transfer-Encoding: chunked`, `Content-Length`, or up to the end.
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = header_end(raw).ok_or("the answer has no end of headers (\\r\\n\\r\\n)")?;
    let head =
        std::str::from_utf8(&raw[..end]).map_err(|_| "the answer's headers are not UTF-8")?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut words = status_line.split_whitespace();
    let version = words.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x status line: {status_line:?}"));
    }
    let status = words
        .next()
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|c| (100..=599).contains(c))
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            return Err(format!("a header line without ':': {l:?}"));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("Content-Length {value:?} is not a number"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        if rest.len() < n {
            return Err(format!(
                "the body has {} of its {n} bytes (Content-Length)",
                rest.len()
            ));
        }
        rest[..n].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

/// Undoes the chunked transfer coding (chunk extensions and trailers are
/// skipped).
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk size line without \\r\\n")?;
        let line = std::str::from_utf8(&b[..eol]).map_err(|_| "a chunk size is not UTF-8")?;
        let hex = line.split(';').next().unwrap_or_default().trim();
        let n = usize::from_str_radix(hex, 16)
            .map_err(|_| format!("chunk size {hex:?} is not hexadecimal"))?;
        b = &b[eol + 2..];
        if n == 0 {
            return Ok(out);
        }
        if b.len() < n + 2 || &b[n..n + 2] != b"\r\n" {
            return Err(format!("a chunk of {n} bytes is cut short"));
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_by_content_length_chunks_or_to_the_end() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{\"a\":1}"[..]));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"{\"a\":1}");
        let r = parse_response(b"HTTP/1.0 403 Forbidden\r\n\r\nno").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (403, &b"no"[..]));
    }

    #[test]
    fn broken_answers_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\n",
            b"SSH-2.0 x\r\n\r\n",
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\nabc\r\n",
        ] {
            assert!(
                parse_response(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_request_names_the_host_and_closes() {
        let r = post_request("127.0.0.1:8077".parse().unwrap(), "/api/stop-all");
        let r = String::from_utf8(r).unwrap();
        assert!(r.starts_with("POST /api/stop-all HTTP/1.1\r\n"), "{r}");
        assert!(r.contains("\r\nHost: 127.0.0.1:8077\r\n"), "{r}");
        assert!(r.contains("\r\nx-nao-rs-app: 1\r\n"), "{r}");
        assert!(r.contains("\r\nConnection: close\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\n"), "{r}");
    }
}
