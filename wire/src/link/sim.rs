//! TODO: sim link.
