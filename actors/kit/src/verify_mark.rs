//! The verification mark: what `cargo nao-rs deploy` found out about the
//! robot's frames before it enabled nao-rs, kept on the robot in
//! [`PATH`] (`/etc/nao-rs/verified`) for `nao-rs doctor` to report.
//!
//! The file holds one line, either
//!
//! ```text
//! verified sha256=<64 hex digits of the capture file> at=<unix seconds>
//! skipped at=<unix seconds>
//! ```
//!
//! `verified`: the capture of the robot's own HAL (`nao-rs capture`, its
//! sha256) replayed byte for byte against nao-rs's frames
//! (`nao-rs-usbmon verify` exited 0). `skipped`: deploy ran with
//! `--skip-verify`. An absent file: never verified. The writer
//! ([`VerifyMark`]'s `Display`, one line with its newline) and the reader
//! ([`parse`]) are here, in one place, so the two ends cannot drift.

use std::fmt;

/// Where the mark lives on the robot.
pub const PATH: &str = "/etc/nao-rs/verified";

/// What deploy recorded about the frames' verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMark {
    /// The capture whose sha256 this is replayed byte for byte.
    Verified {
        /// The sha256 of the capture file (the pcap `nao-rs capture` wrote).
        sha256: [u8; 32],
        /// When deploy wrote the mark, in seconds since the Unix epoch.
        at: u64,
    },
    /// Deploy ran with `--skip-verify`: nothing was compared.
    Skipped {
        /// When deploy wrote the mark, in seconds since the Unix epoch.
        at: u64,
    },
}

impl VerifyMark {
    /// When the mark was written (seconds since the Unix epoch).
    pub fn at(&self) -> u64 {
        match *self {
            VerifyMark::Verified { at, .. } | VerifyMark::Skipped { at } => at,
        }
    }

    /// The capture's sha256 as 64 lowercase hex digits (`None` for
    /// [`VerifyMark::Skipped`]).
    pub fn sha256_hex(&self) -> Option<String> {
        match self {
            VerifyMark::Verified { sha256, .. } => Some(crate::hex::hex(sha256)),
            VerifyMark::Skipped { .. } => None,
        }
    }
}

/// The file's content: the one line and its newline.
impl fmt::Display for VerifyMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyMark::Verified { sha256, at } => {
                writeln!(f, "verified sha256={} at={at}", crate::hex::hex(sha256))
            }
            VerifyMark::Skipped { at } => writeln!(f, "skipped at={at}"),
        }
    }
}

/// Why a mark's text is not a mark (one kind per way it can be wrong; the
/// caller has the text to show beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkError {
    /// The file is empty (or only white space).
    Empty,
    /// More than one non-empty line.
    SeveralLines,
    /// The first word is neither `verified` nor `skipped`.
    UnknownKind,
    /// `verified` without `sha256=` and 64 hex digits.
    BadSha256,
    /// No `at=` with a whole number of seconds.
    BadTime,
    /// A word after the last field, or a field twice.
    ExtraField,
}

impl fmt::Display for MarkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            MarkError::Empty => "is empty",
            MarkError::SeveralLines => "has more than one line",
            MarkError::UnknownKind => "starts with neither `verified` nor `skipped`",
            MarkError::BadSha256 => "says `verified` without `sha256=` and 64 hex digits",
            MarkError::BadTime => "has no `at=` with whole seconds since 1970",
            MarkError::ExtraField => "has a word after its fields or a field twice",
        };
        write!(
            f,
            "the verification mark {PATH} {what}: it must be one line, \
             `verified sha256=<64 hex> at=<unix seconds>` or `skipped at=<unix seconds>`; \
             run `cargo nao-rs deploy --verify ROBOT` (or --skip-verify) again to rewrite it"
        )
    }
}

impl std::error::Error for MarkError {}

/// Reads a mark's text (the file's content; surrounding white space and
/// one trailing newline are fine). Never panics, whatever the text.
pub fn parse(text: &str) -> Result<VerifyMark, MarkError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = lines.next().ok_or(MarkError::Empty)?;
    if lines.next().is_some() {
        return Err(MarkError::SeveralLines);
    }
    let mut words = line.split_ascii_whitespace();
    let kind = words.next().ok_or(MarkError::Empty)?;
    let verified = match kind {
        "verified" => true,
        "skipped" => false,
        _ => return Err(MarkError::UnknownKind),
    };
    let mut sha256 = None;
    let mut at = None;
    for w in words {
        if let Some(v) = w.strip_prefix("sha256=") {
            if !verified {
                return Err(MarkError::ExtraField);
            }
            if sha256.is_some() {
                return Err(MarkError::ExtraField);
            }
            sha256 = Some(crate::hex::unhex32(v).ok_or(MarkError::BadSha256)?);
        } else if let Some(v) = w.strip_prefix("at=") {
            if at.is_some() {
                return Err(MarkError::ExtraField);
            }
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(MarkError::BadTime);
            }
            at = Some(v.parse::<u64>().map_err(|_| MarkError::BadTime)?);
        } else {
            return Err(MarkError::ExtraField);
        }
    }
    let at = at.ok_or(MarkError::BadTime)?;
    if verified {
        let sha256 = sha256.ok_or(MarkError::BadSha256)?;
        Ok(VerifyMark::Verified { sha256, at })
    } else {
        Ok(VerifyMark::Skipped { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn verify_mark_written_line_parses_back() {
        let mut sha256 = [0u8; 32];
        for (i, b) in sha256.iter_mut().enumerate() {
            *b = (i * 17) as u8;
        }
        for m in [
            VerifyMark::Verified {
                sha256,
                at: 1_796_000_000,
            },
            VerifyMark::Skipped { at: 0 },
            VerifyMark::Skipped { at: u64::MAX },
        ] {
            let line = m.to_string();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            assert_eq!(parse(&line), Ok(m), "{line:?}");
        }
    }

    #[test]
    fn verify_mark_exact_format() {
        let m = parse(&format!("verified sha256={SHA} at=1796000000\n")).unwrap();
        assert_eq!(m.sha256_hex().as_deref(), Some(SHA));
        assert_eq!(m.at(), 1_796_000_000);
        assert_eq!(
            m.to_string(),
            format!("verified sha256={SHA} at=1796000000\n")
        );
        assert_eq!(VerifyMark::Skipped { at: 5 }.to_string(), "skipped at=5\n");
        // Upper-case hex and surrounding blanks are read; written back lower.
        let up = parse(&format!(
            "  verified sha256={} at=7  \n\n",
            SHA.to_uppercase()
        ))
        .unwrap();
        assert_eq!(up.sha256_hex().as_deref(), Some(SHA));
        // Field order does not matter.
        assert_eq!(parse(&format!("verified at=7 sha256={SHA}")), Ok(up));
    }

    #[test]
    fn verify_mark_rejects_what_is_not_a_mark() {
        let long = format!("verified sha256={SHA}0 at=1");
        let table: &[(&str, MarkError)] = &[
            ("", MarkError::Empty),
            (" \n\t\n", MarkError::Empty),
            ("skipped at=1\nskipped at=2", MarkError::SeveralLines),
            ("ok at=1", MarkError::UnknownKind),
            ("Verified at=1", MarkError::UnknownKind),
            ("verified at=1", MarkError::BadSha256),
            ("verified sha256=abc at=1", MarkError::BadSha256),
            (&long, MarkError::BadSha256),
            ("skipped", MarkError::BadTime),
            ("skipped at=", MarkError::BadTime),
            ("skipped at=-1", MarkError::BadTime),
            ("skipped at=+1", MarkError::BadTime),
            ("skipped at=1.5", MarkError::BadTime),
            ("skipped at=99999999999999999999999", MarkError::BadTime),
            ("skipped at=1 at=2", MarkError::ExtraField),
            ("skipped at=1 because", MarkError::ExtraField),
            (&format!("skipped sha256={SHA} at=1"), MarkError::ExtraField),
        ];
        for (text, want) in table {
            assert_eq!(parse(text), Err(*want), "{text:?}");
        }
        // Non-hex of the right length, multi-byte characters included.
        let bad = format!("verified sha256={}é at=1", &SHA[..62]);
        assert_eq!(parse(&bad), Err(MarkError::BadSha256));
        let bad = format!("verified sha256={}zz at=1", &SHA[..62]);
        assert_eq!(parse(&bad), Err(MarkError::BadSha256));
    }

    #[test]
    fn verify_mark_error_names_path_and_fix() {
        let e = MarkError::BadTime.to_string();
        assert!(e.contains(PATH) && e.contains("--verify"), "{e}");
    }
}
