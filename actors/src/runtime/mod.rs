//! The runtime and its actors.
