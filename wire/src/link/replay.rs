//! TODO: replay link.
