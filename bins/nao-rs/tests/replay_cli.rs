//! `nao-rs replay FILE...`: one line per file, exit 0 only if every file
//! passed; a difference names the line, the expected and actual call and the
//! first differing byte offset, exit 1.

use std::path::PathBuf;
use std::process::{Command, Output};

use testkit::recordings;

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

#[test]
fn replay_of_a_malformed_recording_fails_naming_the_line() {
    // Two of command/silence in one cycle, a 17-entry accepted list, a t_ms
    // above 18446744073709: each rejected with its file and line.
    let dir = tempfile::tempdir().unwrap();
    let seventeen: Vec<String> = (0..17).map(|v| v.to_string()).collect();
    let cases = [
        (
            "two-commands.rec",
            "nao-rs recording 1\ncycle 0 0\nsilence\nsilence\n".to_string(),
            4,
            "at most one",
        ),
        (
            "long-accepted.rec",
            format!("nao-rs recording 1\naccepted {}\n", seventeen.join(",")),
            2,
            "at most 16",
        ),
        (
            "twice-accepted.rec",
            "nao-rs recording 1\naccepted 10,11,10\n".to_string(),
            2,
            "given twice",
        ),
        (
            "late.rec",
            "nao-rs recording 1\ncycle 0 18446744073710\n".to_string(),
            2,
            "above 18446744073709",
        ),
    ];
    for (name, text, line, why) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = replay(std::slice::from_ref(&path));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains(&format!(
                "FAIL {}: {}:{line}: ",
                path.display(),
                path.display()
            )),
            "{stdout}"
        );
        assert!(stdout.contains(why), "{stdout}");
    }
}

#[test]
fn accepted_list_longer_than_16_or_repeated_is_refused_by_run_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let seventeen: Vec<String> = (0..17).map(|v| v.to_string()).collect();
    let seventeen = seventeen.join(",");
    for (list, why) in [
        (seventeen.as_str(), "17 versions given, at most 16"),
        ("10,11,10", "version 10 is given twice"),
    ] {
        for cmd in ["run", "record"] {
            let mut c = Command::new(env!("CARGO_BIN_EXE_nao-rs"));
            c.arg(cmd)
                .args(["--link", "sim:/nonexistent/sim.sock", "--accepted", list])
                .arg("--page")
                .arg(dir.path().join("deathswitch"))
                .env("NAO_RS_DEATHSWITCH", dir.path().join("deathswitch"));
            if cmd == "record" {
                c.arg("--out").arg(dir.path().join("x.rec"));
            }
            let out = c.output().expect("run nao-rs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{cmd} --accepted {list}: {stderr}");
            assert!(
                stderr.contains(&format!("--accepted: {why}")),
                "{cmd}: {stderr}"
            );
            // Refused before anything was opened or written.
            assert!(!dir.path().join("deathswitch").exists(), "{cmd}");
            assert!(!dir.path().join("x.rec").exists(), "{cmd}");
        }
    }
}
