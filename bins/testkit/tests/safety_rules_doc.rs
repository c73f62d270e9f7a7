//! docs/safety-rules.md cannot drift: every test it names (the backticked
//! names in each table row's last column) is a function somewhere in the
//! tree. A renamed or deleted test fails here, naming the row.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_sources(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            rust_sources(&p, out);
        } else if name.ends_with(".rs") {
            if let Ok(t) = std::fs::read_to_string(&p) {
                out.push_str(&t);
                out.push('\n');
            }
        }
    }
}

/// The snake_case names in backticks of a table row's last cell.
fn test_names(row: &str) -> Vec<&str> {
    let cells: Vec<&str> = row.trim().trim_matches('|').split(" | ").collect();
    let Some(last) = cells.last().filter(|_| cells.len() >= 3) else {
        return Vec::new();
    };
    last.split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| {
            n.contains('_')
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .collect()
}

fn defines_fn(src: &str, name: &str) -> bool {
    src.match_indices(name).any(|(i, _)| {
        let before = src[..i].trim_end();
        let after = src[i + name.len()..].chars().next();
        before.ends_with("fn") && matches!(after, Some('(') | Some('<'))
    })
}

#[test]
fn every_test_named_in_safety_rules_exists() {
    let doc = std::fs::read_to_string(root().join("docs/safety-rules.md")).unwrap();
    let mut src = String::new();
    rust_sources(&root(), &mut src);
    let mut missing = Vec::new();
    let mut named = 0;
    for (i, row) in doc.lines().enumerate() {
        if !row.starts_with('|') {
            continue;
        }
        for n in test_names(row) {
            named += 1;
            if !defines_fn(&src, n) {
                missing.push(format!("docs/safety-rules.md:{}: `{n}`", i + 1));
            }
        }
    }
    assert!(
        named > 100,
        "only {named} test names found: did the table format change?"
    );
    assert!(
        missing.is_empty(),
        "tests named in docs/safety-rules.md that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_row_parser_reads_the_last_cell_only() {
    let row = "| rule `not_a_test` | `a/b.rs` | `one_test`, `two_tests` (trace) |";
    assert_eq!(test_names(row), ["one_test", "two_tests"]);
    assert!(defines_fn("fn one_test() {}", "one_test"));
    assert!(!defines_fn("fn one_test_more() {}", "one_test"));
    assert!(!defines_fn("call(one_test())", "one_test"));
}
