//! `nao-rs replay FILE...`: one line per file, exit 0 only if every file
//! passed; a difference names the line, the expected and actual call and the
//! first differing byte offset, exit 1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn recordings() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recordings");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    v.sort();
    assert!(!v.is_empty());
    v
}

fn replay(files: &[PathBuf]) -> Output {
    // Replay never touches the death switch; point it at a private path anyway.
    let page = tempfile::tempdir().expect("temp dir");
    Command::new(env!("CARGO_BIN_EXE_nao-rs"))
        .arg("replay")
        .args(files)
        .env("NAO_RS_DEATHSWITCH", page.path().join("deathswitch"))
        .output()
        .expect("run nao-rs replay")
}

#[test]
fn replay_of_every_recording_passes_with_one_line_per_file() {
    let files = recordings();
    let out = replay(&files);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), files.len(), "{stdout}");
    for (line, f) in lines.iter().zip(&files) {
        assert!(line.starts_with("PASS "), "{line}");
        assert!(line.contains(&f.display().to_string()));
        assert!(
            line.contains("calls matched") && line.contains("cycles") && line.contains(" ms"),
            "{line}"
        );
    }
}

#[test]
fn replay_with_a_flipped_bulk_out_byte_names_the_line_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let src = &recordings()[0];
    let text = std::fs::read_to_string(src).unwrap();
    let mut changed = 0;
    let mut out_lines = Vec::new();
    let mut seen = 0;
    for (i, l) in text.lines().enumerate() {
        if l.starts_with("bulk_out ") {
            seen += 1;
            if seen == 40 {
                // flip the 8th data byte: offset 7
                let mut s = l.to_string();
                let at = "bulk_out 02 ".len() + 7 * 2;
                let b = u8::from_str_radix(&s[at..at + 2], 16).unwrap() ^ 0x80;
                s.replace_range(at..at + 2, &format!("{b:02x}"));
                out_lines.push(s);
                changed = i + 1;
                continue;
            }
        }
        out_lines.push(l.to_string());
    }
    let bad = dir.path().join("bad.rec");
    std::fs::write(&bad, out_lines.join("\n") + "\n").unwrap();
    let out = replay(&[src.clone(), bad.clone()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().next().unwrap().starts_with("PASS "),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("FAIL {}: line {changed} ", bad.display())),
        "{stdout}"
    );
    assert!(stdout.contains("  expected: bulk_out 02 "), "{stdout}");
    assert!(stdout.contains("  actual:   bulk_out 02 "), "{stdout}");
    assert!(
        stdout.contains("first differing byte: offset 7"),
        "{stdout}"
    );
}

#[test]
fn replay_of_a_missing_file_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.rec");
    let out = replay(std::slice::from_ref(&missing));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("nope.rec"), "{stdout}");
}
