//! What the robot has, as the probe reports it: one remote shell script
//! (POSIX sh and coreutils or busybox: `sha256sum`, `stat`, `readlink`,
//! `grep`) prints plain lines; [`Facts::parse`] reads them and never
//! panics, whatever came back.

use std::collections::BTreeMap;

use super::shell::sq;

/// Where deploy keeps its state on the robot: backups and the manifest.
pub const STATE_DIR: &str = "/var/lib/nao-rs/deploy";
/// The manifest: what deploy created, replaced, disabled, masked.
pub const MANIFEST: &str = "/var/lib/nao-rs/deploy/manifest";
/// The backups of every file deploy replaced, under their own paths.
pub const BACKUP_DIR: &str = "/var/lib/nao-rs/deploy/backup";
/// Aldebaran's user units of `nao` (NAO OS 2.8).
pub const ALDEBARAN_USER_UNITS: &str = "/nao/etc/systemd/user";
/// Where system units may be (the first is the administrator's).
pub const SYSTEM_UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];
/// The units nao-rs takes the place of.
pub const FOREIGN_UNITS: [&str; 3] = ["naoqi.service", "lola.service", "hal.service"];
/// The units deploy enables (the beacon only with a team key).
pub const OUR_UNITS: [&str; 4] = [
    "nao-rs-stop.socket",
    "nao-rs-guard.service",
    "nao-rs.service",
    "nao-rs-beacon.service",
];
/// Tools the generated scripts need on the robot.
pub const TOOLS: [&str; 6] = [
    "base64",
    "sha256sum",
    "stat",
    "readlink",
    "grep",
    "systemctl",
];

/// One path on the robot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathState {
    /// Nothing there.
    Absent,
    /// A regular file: its sha256 (64 hex) and mode (octal digits as read).
    File {
        /// sha256, lowercase hex.
        sha256: String,
        /// Permission bits.
        mode: u32,
    },
    /// A directory.
    Dir,
    /// A symbolic link and where it points.
    Link(String),
    /// Something else (a socket, a device).
    Other,
}

/// Which system the robot runs, as far as deploy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// Aldebaran's NAO OS: HAL, LoLA, NAOqi are user units of `nao` under
    /// /nao/etc/systemd/user.
    Aldebaran,
    /// A team image: HAL and LoLA are system units.
    TeamImage,
    /// Neither: nothing to disable.
    Plain,
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            System::Aldebaran => "Aldebaran NAO OS (HAL, LoLA, NAOqi: user units of nao)",
            System::TeamImage => "a team image (HAL and LoLA: system units)",
            System::Plain => "a plain system (no HAL, LoLA or NAOqi units)",
        })
    }
}

/// Everything the probe found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The user the scripts run as.
    pub uid: Option<u32>,
    /// Tools of [`TOOLS`] the robot lacks.
    pub missing_tools: Vec<String>,
    /// `/` is mounted read-only.
    pub root_read_only: bool,
    /// Every path the probe was asked about.
    pub paths: BTreeMap<String, PathState>,
    /// `systemctl is-enabled` of each unit asked about (empty: unknown).
    pub units: BTreeMap<String, String>,
    /// Unit files that say `Requires=lola.service` (the team's program).
    pub requires_lola: Vec<String>,
    /// Group `hal`'s members, `None` without the group.
    pub hal_members: Option<Vec<String>>,
    /// User `nao` exists.
    pub nao_user: bool,
    /// udev rule files for vendor ffff that assign GROUP or MODE with
    /// `:=` (final: a later rule cannot change it).
    pub udev_final: Vec<String>,
    /// The verification mark's text, when the file exists.
    pub mark: Option<String>,
    /// The manifest's lines, when it exists.
    pub manifest: Option<Vec<String>>,
}

impl Facts {
    /// What is at `path` (absent when the probe did not say).
    pub fn path(&self, path: &str) -> &PathState {
        self.paths.get(path).unwrap_or(&PathState::Absent)
    }

    /// `systemctl is-enabled` of `unit` (`""`: unknown).
    pub fn unit(&self, unit: &str) -> &str {
        self.units.get(unit).map(String::as_str).unwrap_or("")
    }

    /// Which system this is.
    pub fn system(&self) -> System {
        if *self.path(ALDEBARAN_USER_UNITS) == PathState::Dir {
            return System::Aldebaran;
        }
        let unit_file = |u: &str| {
            SYSTEM_UNIT_DIRS
                .iter()
                .any(|d| *self.path(&format!("{d}/{u}")) != PathState::Absent)
        };
        if unit_file("hal.service") || unit_file("lola.service") {
            System::TeamImage
        } else {
            System::Plain
        }
    }

    /// The `*.wants` links of Aldebaran's user units (path, target).
    pub fn user_wants_links(&self) -> impl Iterator<Item = (&str, &str)> {
        let prefix = format!("{ALDEBARAN_USER_UNITS}/");
        self.paths.iter().filter_map(move |(p, s)| match s {
            PathState::Link(t)
                if p.starts_with(&prefix) && p[prefix.len()..].contains(".wants/") =>
            {
                Some((p.as_str(), t.as_str()))
            }
            _ => None,
        })
    }

    /// Reads the probe's output. `Err` names what is wrong with it.
    pub fn parse(text: &str) -> Result<Facts, String> {
        let mut f = Facts::default();
        let mut started = false;
        let mut ended = false;
        for line in text.lines() {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "nao-rs-probe" => started = true,
                "end" => ended = true,
                "uid" => f.uid = rest.trim().parse().ok(),
                "tool" => {
                    if let Some(t) = rest.strip_suffix(" no") {
                        f.missing_tools.push(t.to_string());
                    }
                }
                "rootfs" => {
                    // The last mount of / counts (rootfs first, the real one after).
                    f.root_read_only = rest.split(',').any(|o| o == "ro");
                }
                "absent" => {
                    f.paths.insert(rest.to_string(), PathState::Absent);
                }
                "dir" => {
                    f.paths.insert(rest.to_string(), PathState::Dir);
                }
                "other" => {
                    f.paths.insert(rest.to_string(), PathState::Other);
                }
                "link" => {
                    let (p, t) = rest.split_once(' ').unwrap_or((rest, ""));
                    f.paths
                        .insert(p.to_string(), PathState::Link(t.to_string()));
                }
                "file" => {
                    let mut w = rest.split(' ');
                    let (Some(p), Some(sha), Some(mode)) = (w.next(), w.next(), w.next()) else {
                        return Err(format!("the probe's line {line:?} lacks a field"));
                    };
                    let mode = u32::from_str_radix(mode.trim(), 8).map_err(|_| {
                        format!("the probe's line {line:?}: mode {mode:?} is not octal (is `stat -c %a` there?)")
                    })?;
                    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(format!(
                            "the probe's line {line:?}: {sha:?} is not a sha256 (is `sha256sum` there?)"
                        ));
                    }
                    f.paths.insert(
                        p.to_string(),
                        PathState::File {
                            sha256: sha.to_ascii_lowercase(),
                            mode,
                        },
                    );
                }
                "unit" => {
                    let (u, s) = rest.split_once(' ').unwrap_or((rest, ""));
                    f.units.insert(u.to_string(), s.trim().to_string());
                }
                "requires-lola" => f.requires_lola.push(rest.to_string()),
                "group-hal" => {
                    // hal:x:GID:a,b
                    let members = rest.splitn(4, ':').nth(3).unwrap_or("");
                    f.hal_members = Some(
                        members
                            .split(',')
                            .map(str::trim)
                            .filter(|m| !m.is_empty())
                            .map(String::from)
                            .collect(),
                    );
                }
                "user-nao" => f.nao_user = rest == "yes",
                "udev-final" => f.udev_final.push(rest.to_string()),
                "mark" => f.mark = Some(rest.to_string()),
                "manifest" => f
                    .manifest
                    .get_or_insert_with(Vec::new)
                    .push(rest.to_string()),
                "manifest-empty" => {
                    f.manifest.get_or_insert_with(Vec::new);
                }
                _ => {}
            }
        }
        if !started {
            return Err(format!(
                "the probe printed no `nao-rs-probe` line (its output began {:?}): \
                 is the login shell a POSIX sh, and does the account print a banner on stdout?",
                text.chars().take(120).collect::<String>()
            ));
        }
        if !ended {
            return Err(
                "the probe's output ends early (no `end` line): the connection broke, \
                 or a tool failed; run it again"
                    .into(),
            );
        }
        Ok(f)
    }
}

/// The probe: prints what [`Facts::parse`] reads about `paths` (and their
/// parents) and `units`. `root` prefixes every path (empty on a robot; the
/// tests' fake root).
pub fn probe_script(root: &str, paths: &[String], units: &[&str]) -> String {
    let mut s = String::new();
    s.push_str(&format!("R={}\n", sq(root)));
    s.push_str(
        r#"echo "nao-rs-probe 1"
echo "uid $(id -u)"
for t in TOOLS; do
  if command -v "$t" >/dev/null 2>&1; then echo "tool $t yes"; else echo "tool $t no"; fi
done
if [ -r "$R/proc/mounts" ]; then
  while read -r dev mnt fs opts rest; do
    [ "$mnt" = / ] && echo "rootfs $opts"
  done < "$R/proc/mounts"
fi
p() {
  f="$R$1"
  if [ -L "$f" ]; then echo "link $1 $(readlink "$f")"
  elif [ -f "$f" ]; then
    h=$(sha256sum < "$f" | cut -c1-64)
    echo "file $1 $h $(stat -c %a "$f")"
  elif [ -d "$f" ]; then echo "dir $1"
  elif [ -e "$f" ]; then echo "other $1"
  else echo "absent $1"
  fi
}
"#
        .replace("TOOLS", &TOOLS.join(" "))
        .as_str(),
    );
    for p in paths {
        s.push_str(&format!("p {}\n", sq(p)));
    }
    // Aldebaran's user units and the links that enable them.
    s.push_str(&format!(
        r#"for w in "$R"{au}/*.wants; do
  [ -d "$w" ] || continue
  for u in {fu}; do
    [ -e "$w/$u" ] || [ -L "$w/$u" ] && p "${{w#"$R"}}/$u"
  done
done
for d in {sd} {au}; do
  for f in "$R$d"/*.service; do
    [ -f "$f" ] || continue
    case "$f" in */lola.service) continue ;; esac
    grep -q '^Requires=.*lola\.service' "$f" && echo "requires-lola ${{f#"$R"}}"
  done
done
"#,
        au = ALDEBARAN_USER_UNITS,
        fu = FOREIGN_UNITS.join(" "),
        sd = SYSTEM_UNIT_DIRS.join(" "),
    ));
    for u in units {
        s.push_str(&format!(
            "echo \"unit {u} $(systemctl is-enabled {u} 2>/dev/null | head -n 1)\"\n"
        ));
    }
    s.push_str(&format!(
        r#"if grep -q '^hal:' "$R/etc/group" 2>/dev/null; then echo "group-hal $(grep '^hal:' "$R/etc/group" | head -n 1)"; fi
if grep -q '^nao:' "$R/etc/passwd" 2>/dev/null; then echo "user-nao yes"; else echo "user-nao no"; fi
for d in /etc/udev/rules.d /lib/udev/rules.d /usr/lib/udev/rules.d; do
  for f in "$R$d"/*.rules; do
    [ -f "$f" ] || continue
    grep -i 'ffff' "$f" | grep -q -e 'GROUP:=' -e 'MODE:=' && echo "udev-final ${{f#"$R"}}"
  done
done
[ -f "$R{mark}" ] && echo "mark $(head -n 1 "$R{mark}")"
if [ -f "$R{man}" ]; then
  echo manifest-empty
  while IFS= read -r l; do echo "manifest $l"; done < "$R{man}"
fi
echo end
"#,
        mark = nao_kit::verify_mark::PATH,
        man = MANIFEST,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn facts_parse_reads_every_kind_of_line() {
        let text = format!(
            "banner\nnao-rs-probe 1\nuid 0\ntool base64 yes\ntool stat no\n\
             rootfs rw,relatime\nrootfs ro,noatime\n\
             file /etc/a {SHA} 644\ndir /etc\nabsent /etc/b\nlink /x/y.wants/hal.service ../hal.service\n\
             unit hal.service enabled\nunit lola.service \nrequires-lola /etc/systemd/system/team.service\n\
             group-hal hal:x:990:nao,other\nuser-nao yes\nmark skipped at=1\nmanifest-empty\nmanifest created /a\n\
             what is this line\nend\n"
        );
        let f = Facts::parse(&text).unwrap();
        assert_eq!(f.uid, Some(0));
        assert_eq!(f.missing_tools, vec!["stat".to_string()]);
        assert!(f.root_read_only);
        assert_eq!(
            f.path("/etc/a"),
            &PathState::File {
                sha256: SHA.into(),
                mode: 0o644
            }
        );
        assert_eq!(f.path("/etc"), &PathState::Dir);
        assert_eq!(f.path("/never/asked"), &PathState::Absent);
        assert_eq!(
            f.path("/x/y.wants/hal.service"),
            &PathState::Link("../hal.service".into())
        );
        assert_eq!(f.unit("hal.service"), "enabled");
        assert_eq!(f.unit("lola.service"), "");
        assert_eq!(f.hal_members, Some(vec!["nao".into(), "other".into()]));
        assert!(f.nao_user);
        assert_eq!(f.mark.as_deref(), Some("skipped at=1"));
        assert_eq!(f.manifest, Some(vec!["created /a".to_string()]));
    }

    #[test]
    fn facts_parse_refuses_cut_or_foreign_output_without_panic() {
        assert!(Facts::parse("").unwrap_err().contains("nao-rs-probe"));
        assert!(Facts::parse("nao-rs-probe 1\nuid 0\n")
            .unwrap_err()
            .contains("end"));
        let e = Facts::parse("nao-rs-probe 1\nfile /a zz 644\nend\n").unwrap_err();
        assert!(e.contains("sha256sum"), "{e}");
        let e = Facts::parse(&format!("nao-rs-probe 1\nfile /a {SHA} rw\nend\n")).unwrap_err();
        assert!(e.contains("stat"), "{e}");
        for junk in [
            "file",
            "file ",
            "link",
            "group-hal",
            "unit",
            "uid x",
            "rootfs",
            "\u{feff}",
        ] {
            let _ = Facts::parse(&format!("nao-rs-probe 1\n{junk}\nend\n"));
        }
    }

    #[test]
    fn facts_parse_and_plan_never_panic_on_a_cut_or_mangled_probe() {
        let full = format!(
            "nao-rs-probe 1\nuid 0\ntool base64 yes\nrootfs ro\ndir /nao/etc/systemd/user\n\
             file /nao/etc/systemd/user/lola.service {SHA} 644\n\
             link /nao/etc/systemd/user/a.wants/hal.service ../hal.service\n\
             unit hal.service enabled\ngroup-hal hal:x:990:nao\nuser-nao yes\n\
             mark verified sha256={SHA} at=1\nmanifest-empty\nmanifest created /etc/x\n\
             manifest removed-link /a/b.wants/hal.service ../hal.service\nend\n"
        );
        let bundle = crate::deploy::plan::Bundle::default();
        let opt = crate::deploy::plan::Options {
            beacon: true,
            verify: crate::deploy::plan::Verify::Unset,
            now: 1,
        };
        let mut texts: Vec<String> = (0..full.len())
            .filter(|&i| full.is_char_boundary(i))
            .map(|i| format!("{}end\n", &full[..i]))
            .collect();
        // Each line's fields reversed, the line doubled, only its key left.
        for (n, line) in full.lines().enumerate() {
            let mut lines: Vec<String> = full.lines().map(String::from).collect();
            let words: Vec<&str> = line.split(' ').collect();
            lines[n] = words.iter().rev().copied().collect::<Vec<_>>().join(" ");
            texts.push(lines.join("\n"));
            lines[n] = format!("{line} {line}");
            texts.push(lines.join("\n"));
            lines[n] = words[0].to_string();
            texts.push(lines.join("\n"));
        }
        let mut parsed = 0;
        for text in &texts {
            if let Ok(f) = Facts::parse(text) {
                parsed += 1;
                let _ = crate::deploy::plan::plan(&f, &bundle, &opt);
                let _ = crate::deploy::plan::plan_uninstall(&f);
            }
        }
        // At least every cut at a line's end parses (and was planned).
        assert!(
            parsed >= full.lines().count(),
            "{parsed} of {}",
            texts.len()
        );
    }
}
