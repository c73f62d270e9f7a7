//! The fixture of the page-damage tests: a live holder of a page in a
//! private folder.
#![allow(dead_code)]

use std::path::PathBuf;

use deathswitch::Page;

/// A page at `path` inside the temp folder `dir`, held open by `page`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub page: Page,
}

/// The page at `rel` (folders created) in a new temp folder, re-armed, with
/// `driver` registered as the runtime.
pub fn registered(rel: &str, driver: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let page = Page::open(&path).unwrap();
    page.rearm();
    page.register_driver(driver);
    Fixture { dir, path, page }
}
