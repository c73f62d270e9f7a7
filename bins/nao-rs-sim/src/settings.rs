//! The board settings of the command line, parsed into a [`BodyConfig`] and
//! a preference block. Every error names the flag, the value and the fix.

use std::path::Path;

use nao_wire::protocol::tables::PREFS_LEN;

use crate::body::{handshake_index, BodyConfig};
use crate::ctl::parse_joint;
use crate::prefs;

/// What [`BoardSettings::build`] gives: the body configuration, the preference
/// block and a warning about the block.
pub type Built = (BodyConfig, Box<[u8; PREFS_LEN]>, Option<String>);

/// The settings as given on the command line (each a list of raw values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoardSettings {
    /// `--versions V`: every board's configuration version.
    pub versions: Option<String>,
    /// `--version ADDR=V`: one board's version.
    pub version: Vec<String>,
    /// `--late ADDR=N`: the board answers the handshake from its Nth request.
    pub late: Vec<String>,
    /// `--never ADDR`: the board never answers the handshake.
    pub never: Vec<String>,
    /// `--accepted V[,V...]`: versions the trace counts as accepted.
    pub accepted: Option<String>,
    /// `--body-id ID`.
    pub body_id: Option<String>,
    /// `--zero JOINT=COUNT`.
    pub zero: Vec<String>,
    /// `--prefs FILE`: serve this 4,635-byte block as it is.
    pub prefs: Option<String>,
}

fn parse_u(flag: &str, s: &str, max: u64) -> Result<u64, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        s.parse::<u64>()
    };
    match v {
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!(
            "{flag}: {s:?} is not a number in 0..={max} (decimal, or hex with 0x)"
        )),
    }
}

/// A handshake board address (`0x10`..=`0x1e`), as its index.
pub fn parse_board(flag: &str, s: &str) -> Result<usize, String> {
    let a = parse_u(flag, s, 255)? as u8;
    handshake_index(a).ok_or_else(|| {
        format!("{flag}: {s:?} is no joint or foot board; use an address 0x10..=0x1e")
    })
}

fn split<'a>(flag: &str, s: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    s.split_once('=')
        .ok_or_else(|| format!("{flag}: {s:?} must be {what}"))
}

impl BoardSettings {
    /// The body configuration and the preference block these settings give.
    /// A `--prefs` file is served as it is; the second value is a warning
    /// when it is invalid (the runtime's start-up will refuse it).
    pub fn build(&self) -> Result<Built, String> {
        let mut cfg = BodyConfig::default();
        if let Some(v) = &self.versions {
            let v = parse_u("--versions", v, 255)? as u8;
            for b in cfg.boards.iter_mut() {
                b.version = v;
            }
        }
        for s in &self.version {
            let (a, v) = split("--version", s, "ADDR=VERSION, e.g. 0x13=11")?;
            let i = parse_board("--version", a)?;
            cfg.boards[i].version = parse_u("--version", v, 255)? as u8;
        }
        for s in &self.late {
            let (a, n) = split("--late", s, "ADDR=N, e.g. 0x13=2")?;
            let i = parse_board("--late", a)?;
            cfg.boards[i].from = parse_u("--late", n, u64::from(u16::MAX))?.max(1) as u16;
        }
        for s in &self.never {
            let i = parse_board("--never", s)?;
            cfg.boards[i].never = true;
        }
        if let Some(list) = &self.accepted {
            cfg.accepted = list
                .split(',')
                .map(|v| parse_u("--accepted", v.trim(), 255).map(|v| v as u8))
                .collect::<Result<_, _>>()?;
        }
        let mut zeros = prefs::DEFAULT_ZEROS;
        for s in &self.zero {
            let (j, c) = split("--zero", s, "JOINT=COUNT, e.g. 3=2048 or LKneePitch=2048")?;
            let j = parse_joint(j).map_err(|e| format!("--zero: {e}"))?;
            zeros[j] = parse_u("--zero", c, 4095)? as u16;
        }
        let body_id = self.body_id.as_deref().unwrap_or(prefs::DEFAULT_BODY_ID);
        if !body_id.is_ascii() || body_id.len() > prefs::BODY_ID_LEN {
            return Err(format!(
                "--body-id: {body_id:?} must be ASCII, at most 20 characters"
            ));
        }
        let (block, warning) = match &self.prefs {
            Some(path) => {
                let block = read_prefs(Path::new(path))?;
                let warning = prefs::check(&block)
                    .map(|why| format!("--prefs {path}: invalid block served as it is: {why}"));
                (block, warning)
            }
            None => (prefs::build(body_id, &zeros), None),
        };
        cfg.zeros = prefs::zeros(&block);
        cfg.foot_calibration = prefs::foot_calibration(&block);
        Ok((cfg, block, warning))
    }
}

fn read_prefs(path: &Path) -> Result<Box<[u8; PREFS_LEN]>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("--prefs {}: cannot read: {e}", path.display()))?;
    let block: Box<[u8; PREFS_LEN]> =
        bytes
            .into_boxed_slice()
            .try_into()
            .map_err(|b: Box<[u8]>| {
                format!(
                    "--prefs {}: {} bytes, a preference block has {PREFS_LEN}",
                    path.display(),
                    b.len()
                )
            })?;
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_set_every_board_and_version_one_board() {
        let s = BoardSettings {
            versions: Some("11".into()),
            version: vec!["0x13=10".into()],
            late: vec!["0x1e=2".into()],
            never: vec!["0x1d".into()],
            ..Default::default()
        };
        let (cfg, _, w) = s.build().unwrap();
        assert!(w.is_none());
        assert_eq!(cfg.boards[0].version, 11);
        assert_eq!(cfg.boards[3].version, 10);
        assert_eq!(cfg.boards[14].from, 2);
        assert!(cfg.boards[13].never);
        assert_eq!(cfg.foot_calibration, prefs::default_foot_calibration());
    }

    #[test]
    fn body_id_and_zero_flags_land_in_the_preference_block() {
        let s = BoardSettings {
            body_id: Some("SIM-BODY".into()),
            zero: vec!["LKneePitch=2000".into(), "0=100".into()],
            ..Default::default()
        };
        let (cfg, block, _) = s.build().unwrap();
        assert_eq!(&block[6..14], b"SIM-BODY");
        assert_eq!(prefs::zeros(&block)[10], 2000);
        assert_eq!(cfg.zeros[0], 100);
        assert_eq!(prefs::check(&block), None);
    }

    #[test]
    fn bad_settings_name_the_flag_and_the_value() {
        let bad = |s: BoardSettings| s.build().unwrap_err();
        let e = bad(BoardSettings {
            version: vec!["0x05=10".into()],
            ..Default::default()
        });
        assert!(e.contains("--version") && e.contains("0x05"), "{e}");
        let e = bad(BoardSettings {
            late: vec!["0x13".into()],
            ..Default::default()
        });
        assert!(e.contains("ADDR=N"), "{e}");
        let e = bad(BoardSettings {
            zero: vec!["3=5000".into()],
            ..Default::default()
        });
        assert!(e.contains("4095"), "{e}");
        let e = bad(BoardSettings {
            prefs: Some("/nonexistent/p".into()),
            ..Default::default()
        });
        assert!(e.contains("/nonexistent/p"), "{e}");
    }

    #[test]
    fn invalid_prefs_file_is_served_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.bin");
        std::fs::write(&p, vec![0u8; PREFS_LEN]).unwrap();
        let s = BoardSettings {
            prefs: Some(p.display().to_string()),
            ..Default::default()
        };
        let (_, block, w) = s.build().unwrap();
        assert_eq!(block[0], 0);
        assert!(w.unwrap().contains("magic"));
        std::fs::write(&p, vec![0u8; 10]).unwrap();
        assert!(s.build().unwrap_err().contains("10 bytes"));
    }
}
