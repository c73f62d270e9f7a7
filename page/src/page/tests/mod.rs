//! The page file's rules, each against a real file: the opening rules
//! (`opening`), damage done by a second process under a live mapping
//! (`integrity`), and compound faults under a holder that registered its
//! identity (`compound_faults`). The fixture: a live holder of a page in a
//! private folder.

mod compound_faults;
mod integrity;
mod opening;

use std::path::PathBuf;

use crate::{Page, Switch};

/// A page at `path` inside the temp folder `dir`, held open by `page`.
struct Fixture {
    dir: tempfile::TempDir,
    path: PathBuf,
    page: Page,
}

/// The page at `rel` (folders created) in a new temp folder, re-armed, with
/// `driver` registered as the runtime.
fn registered(rel: &str, driver: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let page = Page::open(&path).unwrap();
    page.rearm();
    page.register(driver);
    Fixture { dir, path, page }
}

/// Tripped, or without its magic: not armed.
fn tripped(page: &Page) -> bool {
    !page.snapshot().armed
}
