//! The nao-rs death switch: a shared page of atomics at `/run/nao-rs/deathswitch`.
//!
//! See `docs/page.md` and `../shared/seeds/death-switch-in-detail.txt`.
