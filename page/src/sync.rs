//! The atomics facade: std's atomics normally, loom's under `cfg(loom)`, so
//! the loom models run the very code of [`crate::Cells`] on an in-memory
//! struct.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
