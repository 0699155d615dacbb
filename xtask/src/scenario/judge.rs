//! The checks every harness makes of a role, over its typed transcript: how it ended (an
//! [`Exit`] kind, never a number), which events it printed, and whether every JSON line it
//! printed was an event of its binary. What is special to a harness (bandwidth, a capture, the
//! fabric report, bench rows) is its own small judge over the same [`Role`]s.

use super::exit::{ExitKind, wanted};
use super::transcript::Role;
use rdma_proto::Exit;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::Event as ServerEvent;

/// Why `role` did not end as `want` says (`None`: success), if it did not: a role killed at its
/// deadline says which deadline and what it waited on (the agent's error).
///
/// A role that panicked (or printed a backtrace) never ended as wanted, whatever its status.
pub fn exit(role: &Role, want: Option<Exit>) -> Option<String> {
    if let Some(line) = crate::plan::panic_line(&role.stderr) {
        return Some(format!("panicked: {line}"));
    }
    if role.exit == ExitKind::TimedOut {
        let why = role.error.as_deref().unwrap_or("killed at its deadline");
        return Some(why.to_owned());
    }
    (!role.exit.is(want)).then(|| {
        format!(
            "{}, expected exit {}{}",
            role.exit,
            wanted(want),
            role.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        )
    })
}

/// Each JSON line of `role`'s stdout that is no event of its binary, named.
pub fn strangers(role: &Role) -> Vec<String> {
    role.strangers.iter().map(ToString::to_string).collect()
}

/// That every line `role` printed is an event of its binary (`--json` prints nothing else):
/// the first that is not, named.
pub fn only_events(role: &Role) -> Result<(), String> {
    if let Some(e) = role.strangers.first() {
        return Err(e.to_string());
    }
    match role.human.first() {
        Some(line) => Err(format!("not an event this reader knows (no JSON): {line}")),
        None => Ok(()),
    }
}

/// Whether `role` printed a server event `check` holds for.
pub fn has_server(role: &Role, check: impl Fn(&ServerEvent<'static>) -> bool) -> bool {
    role.server.iter().any(check)
}

/// Whether `role` printed a client event `check` holds for.
pub fn has_client(role: &Role, check: impl Fn(&ClientEvent<'static>) -> bool) -> bool {
    role.client.iter().any(check)
}

/// Whether the client said the server verified its write.
pub fn client_verified(role: &Role) -> bool {
    has_client(role, |e| {
        matches!(e, ClientEvent::Verified { verified: true, .. })
    })
}

/// Whether `e` is the client's `error` event of kind `exit` (with its status) whose message
/// mentions `needle`, case aside, read as the one line `--json` puts on stderr.
pub fn failed_as(e: &ClientEvent<'_>, exit: Exit, needle: &str) -> bool {
    matches!(e, ClientEvent::Error { kind, exit_code, message }
        if *kind == exit && *exit_code == exit.code() && mentions(message, needle))
}

/// Whether `text`, its lines joined by single spaces (as `--json` writes a failure on stderr),
/// holds `needle`, case aside.
pub fn mentions(text: &str, needle: &str) -> bool {
    let one_line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    one_line.to_lowercase().contains(&needle.to_lowercase())
}

/// How many server events `check` holds for.
pub fn count_server(role: &Role, check: impl Fn(&ServerEvent<'static>) -> bool) -> usize {
    role.server.iter().filter(|e| check(e)).count()
}
