//! The scenario engine every harness that runs our binaries shares (e2e, vm-smoke, pkg-test,
//! the fabric phase, bench; the hostile matrix's probe): a case is data (the roles and their argv, [`role`]); the plans run in
//! guests or on this host; one builder turns what came back into a [`transcript`] (each
//! role's [`ExitKind`](exit::ExitKind), its typed events, its output); [`judge`] holds the
//! checks they all make of it, and each harness adds its own small judge.

pub mod exit;
pub mod judge;
pub mod role;
pub mod transcript;

#[cfg(test)]
mod tests;
