//! The table of hostile cases, and which of them fit a server's configuration.

use crate::config::Config;
use clap::ValueEnum;

/// One hostile behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Case {
    /// Garbage text instead of JSON: `bad_json`.
    BadJson,
    /// A JSON object cut off mid-way: `bad_json`.
    TruncatedJson,
    /// Valid JSON that is not an object (`[1]`): `bad_json`.
    NotObject,
    /// Bytes that are not UTF-8: `bad_utf8`.
    BadUtf8,
    /// 10 MiB without a newline: `line_too_long`; the server stops reading at its cap.
    LineTooLong,
    /// Hellos with one wrong field each (wrong JSON type, float, negative, bad GID/MTU/notify,
    /// zero length, missing field): `invalid_field` for every one.
    InvalidFields,
    /// `qpn` = 2^24: `invalid_field` naming `qpn`.
    QpnOutOfRange,
    /// `v: 2`: `unsupported_version` with `supported: [1]`.
    BadVersion,
    /// An unknown `type`: `unknown_type`.
    UnknownType,
    /// A server message (`banner`) sent to the server: `unexpected_message`.
    BannerToServer,
    /// `written` before `hello`: `unexpected_message`.
    WrittenBeforeHello,
    /// A valid hello (gets a real accept), then a second hello: `unexpected_message`
    /// (both notify modes).
    DuplicateHello,
    /// A `next` (rounds) before the hello, and one in place of the write after a valid hello's
    /// accept (a session that did not ask for rounds): `unexpected_message` both times.
    NextOutOfTurn,
    /// A hello asking for one byte more than the buffer: `too_long`.
    TooLong,
    /// Two sessions at once and one after: three different rkeys.
    FreshRkey,
    /// The client sends `error` first: the server closes without answering.
    ClientError,
    /// Banner read, then silence: `timeout` after the server's --timeout, then close.
    SlowLoris,
    /// A hello dribbled one byte at a time: the deadline covers the whole line, `timeout`.
    SlowDrip,
    /// Banner read, then the client vanishes.
    VanishAfterBanner,
    /// A valid hello, then the client vanishes without reading the accept.
    VanishAfterHello,
    /// A valid hello, the accept read (server QP in RTS), then the client vanishes (both modes).
    VanishAfterAccept,
    /// A wrong token: `unauthorized`, and the reply does not echo the real token.
    WrongToken,
    /// No token where one is required: `unauthorized`.
    MissingToken,
    /// A client outside --allow: `forbidden` as the very first line, no banner.
    Forbidden,
    /// --max-clients idle connections, then one more: `busy` as its first line.
    Busy,
    /// Bench hellos with one bad parameter each (notify imm, `bench` not an object, sizes out
    /// of order, largest size not the length, lat without its buffer, 0 iterations, unknown
    /// mode): `invalid_field` for every one.
    BenchInvalid,
    /// A bench hello asking for 1 TiB: `too_long` (the bench cap, not the write buffer).
    BenchTooLong,
    /// A valid bench lat hello (pointing at a buffer we do not have), the accept read (the
    /// server now spins on its buffer for our first ping), then we vanish.
    BenchVanish,
    /// A write hello and a bench lat hello naming a victim's GID, not ours: `invalid_field`
    /// naming `gid`, no accept (no reflection, no amplification).
    VictimGid,
    /// --max-per-ip idle connections from us, then one more: `busy` naming `--max-per-ip`.
    PerIp,
    /// Two bench lat sessions that together exceed --max-pinned: the second is `busy`.
    PinnedBudget,
}

impl Case {
    /// The name used on the command line and in reports.
    #[must_use]
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_else(|| format!("{self:?}"))
    }

    /// Why this case does not fit the server's configuration, if it does not.
    #[must_use]
    pub fn unfit(self, cfg: &Config) -> Option<&'static str> {
        match self {
            Case::Forbidden if !cfg.expect_forbidden => {
                Some("needs --expect-forbidden (a server whose --allow excludes us)")
            }
            Case::Forbidden => None,
            _ if cfg.expect_forbidden => {
                Some("the server refuses us (--expect-forbidden): only `forbidden` applies")
            }
            Case::WrongToken | Case::MissingToken if cfg.token.is_none() => {
                Some("needs --token (a server that requires one)")
            }
            Case::Busy if cfg.max_clients.is_none() => {
                Some("needs --max-clients (the server's value)")
            }
            Case::PerIp if cfg.max_per_ip.is_none() => {
                Some("needs --max-per-ip (the server's value)")
            }
            Case::PinnedBudget if cfg.max_pinned.is_none() => {
                Some("needs --max-pinned (the server's value)")
            }
            _ => None,
        }
    }
}

/// The cases to run: the requested ones (all must fit), or every one that fits.
///
/// # Errors
/// A requested case that does not fit, and why.
pub fn select(requested: &[Case], cfg: &Config) -> Result<Vec<Case>, String> {
    if requested.is_empty() {
        return Ok(Case::value_variants()
            .iter()
            .copied()
            .filter(|c| c.unfit(cfg).is_none())
            .collect());
    }
    for c in requested {
        if let Some(why) = c.unfit(cfg) {
            return Err(format!(
                "case `{}` does not fit this server: it {why}",
                c.name()
            ));
        }
    }
    Ok(requested.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(token: bool, max_clients: Option<u32>, expect_forbidden: bool) -> Config {
        Config {
            token: token.then(|| "t".to_owned()),
            max_clients,
            expect_forbidden,
            ..Config::for_tests("127.0.0.1:1".parse().unwrap())
        }
    }

    #[test]
    fn case_selection_follows_the_configuration() {
        let plain = config(false, None, false);
        let all = select(&[], &plain).unwrap();
        for c in [
            Case::Forbidden,
            Case::Busy,
            Case::WrongToken,
            Case::MissingToken,
            Case::PerIp,
            Case::PinnedBudget,
        ] {
            assert!(!all.contains(&c), "{}", c.name());
        }
        assert!(all.contains(&Case::BadJson) && all.contains(&Case::SlowDrip));
        assert!(select(&[Case::Busy], &plain).is_err());
        assert_eq!(
            select(&[Case::BadJson, Case::TooLong], &plain).unwrap(),
            vec![Case::BadJson, Case::TooLong]
        );
        let full = select(&[], &config(true, Some(4), false)).unwrap();
        assert_eq!(
            full.len(),
            Case::value_variants().len() - 3,
            "all but forbidden, per_ip and pinned_budget"
        );
        assert_eq!(
            select(&[], &config(true, Some(4), true)).unwrap(),
            vec![Case::Forbidden]
        );
        assert_eq!(Case::LineTooLong.name(), "line_too_long");
    }
}
