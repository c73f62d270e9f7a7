//! The recording link: wraps any link and writes every call.
