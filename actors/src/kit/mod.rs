//! The actor kit.
