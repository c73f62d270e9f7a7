//! The apply script: a plan as one POSIX sh script, sent over ssh's stdin
//! (files inline, base64). Each step prints what it does, stops the script
//! with the step's name when it fails, and, once it succeeded, appends its
//! manifest lines: a deploy cut short is still undone by `--uninstall`.

use std::fmt::Write as _;

use super::facts::{BACKUP_DIR, MANIFEST, STATE_DIR};
use super::plan::{Change, Plan, Record};
use super::shell::sq;

const B64_LINE: usize = 76;

pub fn base64_lines(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len() / 3 * 4 + bytes.len() / 57 + 8);
    let mut col = 0;
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= n {
                out.push(A[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
        col += 4;
        if col >= B64_LINE {
            out.push('\n');
            col = 0;
        }
    }
    if col != 0 {
        out.push('\n');
    }
    out
}

const PRELUDE: &str = r#"set -u
S="$R/__STATE__"; M="$R/__MANIFEST__"; B="$R/__BACKUP__"
fail() { echo "FAILED: $*" >&2; exit 1; }
note() { printf '%s\n' "$1" >>"$M" || fail "cannot append to $M"; }
step() { echo "== $*"; }
as_nao() {
  u=$(id -u nao 2>/dev/null) || { echo "   (no user nao here: skipped systemctl --user $*)"; return 0; }
  su -s /bin/sh nao -c "XDG_RUNTIME_DIR=/run/user/$u systemctl --user $*" ||
    echo "   note: systemctl --user $* as nao failed (no session of nao?): reboot the robot so that it takes effect"
}
# groupadd, usermod, gpasswd and groupdel rewrite the account files' own
# backups (/etc/group- ...) with the state before each change: the first
# group change keeps them as they were, the uninstall's last puts them back,
# so nothing of nao-rs is left in them either.
ACCOUNTS="group- gshadow- passwd- shadow-"
keep_accounts() {
  mkdir -p "$B/accounts" || return 1
  for f in $ACCOUNTS; do
    if [ -e "$B/accounts/$f" ] || [ -e "$B/accounts/$f.absent" ]; then continue; fi
    if [ -e "$R/etc/$f" ]; then cp -p "$R/etc/$f" "$B/accounts/$f" || return 1
    else : >"$B/accounts/$f.absent" || return 1; fi
  done
}
restore_accounts() {
  for f in $ACCOUNTS; do
    if [ -e "$B/accounts/$f" ]; then cp -p "$B/accounts/$f" "$R/etc/$f" || return 1
    elif [ -e "$B/accounts/$f.absent" ]; then rm -f "$R/etc/$f"; fi
  done
}
"#;

/// The script that carries out `plan` (install or uninstall). `root`
/// prefixes every path (empty on a robot).
pub fn render(plan: &Plan, root: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "R={}", sq(root));
    s.push_str(
        &PRELUDE
            .replace("__STATE__", STATE_DIR.trim_start_matches('/'))
            .replace("__MANIFEST__", MANIFEST.trim_start_matches('/'))
            .replace("__BACKUP__", BACKUP_DIR.trim_start_matches('/')),
    );
    if plan.remount {
        s.push_str(
            "step \"remount / read-write (and read-only again at the end)\"\n\
             mount -o remount,rw / || fail \"mount -o remount,rw /: is this root?\"\n\
             trap 'mount -o remount,ro / || echo \"note: / stays read-write: mount -o remount,ro / failed\"' EXIT\n",
        );
    }
    let mut pending = Vec::new();
    for c in &plan.changes {
        let _ = writeln!(s, "step {}", sq(&c.to_string()));
        let what = sq(&c.to_string());
        let body = commands(c);
        let _ = writeln!(s, "(\n{body}\n) || fail {what}");
        // The state directory's own parents are recorded once the
        // manifest has a directory to live in.
        let in_state_path = matches!(c, Change::MkDir(d) if STATE_DIR.starts_with(d.as_str()));
        pending.extend(c.manifest_lines());
        if !in_state_path || matches!(c, Change::MkDir(d) if d == STATE_DIR) {
            for l in pending.drain(..) {
                let _ = writeln!(s, "note {}", sq(&l));
            }
        }
    }
    s.push_str("echo \"== done\"\n");
    s
}

fn p(path: &str) -> String {
    format!("\"$R\"{}", sq(path))
}

/// The shell command that copies `path` (quoted: `q`) into the backup
/// directory, links as links, mode and times kept.
fn backup(q: &str) -> String {
    format!("mkdir -p \"$B\"$(dirname {q}) && cp -P -p \"$R\"{q} \"$B\"{q}")
}

/// The first lines of a write or a link to the quoted path `q`: its
/// backup when it replaces something (none otherwise).
fn backup_if_replaced(record: Record, q: &str) -> String {
    let mut s = String::new();
    if record == Record::Replaced {
        let _ = writeln!(s, "{} || exit 1", backup(q));
    }
    s
}

fn commands(c: &Change) -> String {
    match c {
        Change::MkDir(d) => format!("mkdir {} || [ -d {} ]", p(d), p(d)),
        Change::AddGroup => "keep_accounts || exit 1\n\
             if command -v groupadd >/dev/null 2>&1; then groupadd --system hal; \
             else addgroup -S hal; fi"
            .into(),
        Change::AddMember => "keep_accounts || exit 1\n\
             if command -v usermod >/dev/null 2>&1; then usermod -a -G hal nao; \
             else addgroup nao hal; fi"
            .into(),
        Change::StopUserUnits(us) => format!("as_nao stop {}", us.join(" ")),
        Change::RemoveLink { path, .. } => {
            let q = sq(path);
            format!("{} && rm -f \"$R\"{q}", backup(&q))
        }
        Change::Disable(u) => format!("systemctl disable --now {u}"),
        Change::Mask(u) => format!("systemctl mask --now {u}"),
        Change::Write {
            path,
            mode,
            owner,
            content,
            record,
        } => {
            let q = sq(path);
            let mut s = backup_if_replaced(*record, &q);
            // A step that fails leaves no half-written file behind.
            let tmp = format!("\"$R\"{q}.nao-rs-new");
            let undo = format!("{{ rm -f {tmp}; exit 1; }}");
            let _ = write!(
                s,
                "base64 -d >{tmp} <<'NAO_RS_DEPLOY_EOF' || {undo}\n{}NAO_RS_DEPLOY_EOF\n",
                base64_lines(&content.bytes)
            );
            let _ = writeln!(s, "chmod {mode:o} {tmp} || {undo}");
            if let Some(o) = owner {
                let _ = writeln!(s, "chown {} {tmp} || {undo}", sq(o));
            }
            let _ = write!(
                s,
                "[ \"$(sha256sum <{tmp} | cut -c1-64)\" = {sha} ] || {{ echo \"{path} arrived \
                 with another sha256 than sent (the connection cut?): run deploy again\" >&2; \
                 rm -f {tmp}; exit 1; }}\n\
                 mv -f {tmp} \"$R\"{q}",
                sha = content.sha256
            );
            s
        }
        Change::Link {
            path,
            target,
            record,
        } => {
            let q = sq(path);
            let mut s = backup_if_replaced(*record, &q);
            let _ = write!(s, "rm -f \"$R\"{q} && ln -s {} \"$R\"{q}", sq(target));
            s
        }
        Change::DaemonReload => "systemctl daemon-reload".into(),
        Change::UserDaemonReload => "as_nao daemon-reload".into(),
        Change::UdevReload => {
            "udevadm control --reload && udevadm trigger --attr-match=idVendor=ffff".into()
        }
        Change::Tmpfiles => "systemd-tmpfiles --create \"$R\"/etc/tmpfiles.d/nao-rs.conf".into(),
        Change::Enable(us) => format!("systemctl enable --now {}", us.join(" ")),
        Change::Restart(us) => format!("systemctl try-restart {}", us.join(" ")),
        Change::StopOurs(us) => format!("systemctl disable --now {}", us.join(" ")),
        Change::Remove(path) => format!("rm -f {}", p(path)),
        Change::Restore(path) => format!(
            "[ -e \"$B\"{q} ] || [ -L \"$B\"{q} ] || {{ echo \"no backup $B{path}\" >&2; exit 1; }}\n\
             rm -f \"$R\"{q} && cp -P -p \"$B\"{q} \"$R\"{q}",
            q = sq(path)
        ),
        Change::RestoreLink { path, target } => format!(
            "rm -f {l} && if [ -L \"$B\"{q} ]; then cp -P -p \"$B\"{q} {l}; else ln -s {t} {l}; fi",
            l = p(path),
            q = sq(path),
            t = sq(target)
        ),
        Change::Unmask(u) => format!("systemctl unmask {u}"),
        Change::EnableAgain(u) => format!("systemctl enable --now {u}"),
        Change::StartUserUnits(us) => format!("as_nao start {}", us.join(" ")),
        Change::DelMember => "if command -v gpasswd >/dev/null 2>&1; then gpasswd -d nao hal; \
             else delgroup nao hal; fi && restore_accounts"
            .into(),
        Change::DelGroup => "if command -v groupdel >/dev/null 2>&1; then groupdel hal; \
             else delgroup hal; fi && restore_accounts"
            .into(),
        Change::DropState => "rm -rf \"$S\"".into(),
        Change::RmDir(d) => format!(
            "if [ -d {q} ]; then rmdir {q} 2>/dev/null || echo \"   left {d}: not empty\"; fi",
            q = p(d)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_coreutils_alphabet_and_padding() {
        assert_eq!(base64_lines(b""), "");
        assert_eq!(base64_lines(b"f"), "Zg==\n");
        assert_eq!(base64_lines(b"fo"), "Zm8=\n");
        assert_eq!(base64_lines(b"foo"), "Zm9v\n");
        assert_eq!(base64_lines(&[0xff, 0xfe, 0xfd, 0]), "//79AA==\n");
        let long = base64_lines(&[0u8; 120]);
        assert!(long.lines().all(|l| l.len() <= B64_LINE), "{long}");
    }
}
