//! `--config FILE`: the server's settings in a TOML file, under the flags.
//!
//! Every setting that describes the deployment rather than one run can live in the file, spelt
//! like its flag without the dashes in front (`buffer-size = 65536` is `--buffer-size 65536`):
//! `listen`, `ib-dev`, `ib-port`, `gid-idx`, `tclass`, `hop-limit`, `sl`, `qp-timeout`, `cq-mode`, `buffer-size`, `bench-max-bytes`,
//! `bench-max-time`, `max-pinned`, `timeout`, `keep-alive`, `keep-max-time`, `max-clients`, `max-per-ip`, `allow` (a list) and
//! `token-file`; `device` and `gid-index`, the hidden aliases of `--ib-dev` and `--gid-idx`,
//! still read as those (`port`, like the flag it named, is gone: it read as a TCP port). A
//! flag given on the command line (or through its environment variable;
//! `RDMA_WRITE_TOKEN` for the token) wins over the file.
//!
//! The file's values go through the very parsers of the flags, so a value the command line
//! refuses is refused from the file too, with the file, the line and the key named; so is a key
//! the server does not know (a typo must not silently leave a setting at its default).

use crate::cli::Args;
use clap::parser::ValueSource;
use clap::{CommandFactory as _, FromArgMatches as _, Parser as _};
use serde::Deserialize;
use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Where the Debian package puts the configuration (its unit passes `--config` with it).
pub const PACKAGED: &str = "/etc/rdma-server/rdma-server.toml";

/// A configuration file that cannot be used (exit code 2, like any usage error).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read the configuration file {path}: {source}. Pass an existing file to --config (the package installs {PACKAGED})"
    )]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}, line {line}, column {column}: {}{message}", key.as_ref().map(|k| format!("`{k}`: ")).unwrap_or_default())]
    Invalid {
        path: String,
        line: usize,
        column: usize,
        /// The key the problem is about, when there is one.
        key: Option<String>,
        message: String,
    },
}

/// The file's settings; a key outside this list is refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<Spanned<String>>,
    #[serde(alias = "device")]
    ib_dev: Option<Spanned<String>>,
    ib_port: Option<Spanned<u8>>,
    #[serde(alias = "gid-index")]
    gid_idx: Option<Spanned<u32>>,
    tclass: Option<Spanned<u8>>,
    hop_limit: Option<Spanned<u8>>,
    sl: Option<Spanned<u8>>,
    qp_timeout: Option<Spanned<u8>>,
    cq_mode: Option<Spanned<String>>,
    buffer_size: Option<Spanned<u64>>,
    bench_max_bytes: Option<Spanned<u64>>,
    bench_max_time: Option<Spanned<String>>,
    max_pinned: Option<Spanned<u64>>,
    timeout: Option<Spanned<String>>,
    keep_alive: Option<Spanned<String>>,
    keep_max_time: Option<Spanned<String>>,
    max_clients: Option<Spanned<u32>>,
    max_per_ip: Option<Spanned<u32>>,
    allow: Option<Spanned<Vec<String>>>,
    token_file: Option<Spanned<PathBuf>>,
}

/// One setting from the file, as the flag it stands for.
#[derive(Debug)]
struct Setting {
    /// The key in the file (and the long flag without `--`).
    key: &'static str,
    /// clap's id of the flag.
    id: &'static str,
    /// Where its value is in the file.
    span: Range<usize>,
    /// The flag's value(s); a list becomes the flag repeated.
    values: Vec<OsString>,
}

impl FileSettings {
    fn settings(&self) -> Vec<Setting> {
        fn one<T: ToString>(
            key: &'static str,
            id: &'static str,
            v: Option<&Spanned<T>>,
        ) -> Option<Setting> {
            v.map(|v| Setting {
                key,
                id,
                span: v.span(),
                values: vec![v.get_ref().to_string().into()],
            })
        }
        let mut out: Vec<Setting> = [
            one("listen", "listen", self.listen.as_ref()),
            one("ib-dev", "device", self.ib_dev.as_ref()),
            one("ib-port", "port", self.ib_port.as_ref()),
            one("gid-idx", "gid_index", self.gid_idx.as_ref()),
            one("tclass", "tclass", self.tclass.as_ref()),
            one("hop-limit", "hop_limit", self.hop_limit.as_ref()),
            one("sl", "sl", self.sl.as_ref()),
            one("qp-timeout", "qp_timeout", self.qp_timeout.as_ref()),
            one("cq-mode", "cq_mode", self.cq_mode.as_ref()),
            one("buffer-size", "buffer_size", self.buffer_size.as_ref()),
            one(
                "bench-max-bytes",
                "bench_max_bytes",
                self.bench_max_bytes.as_ref(),
            ),
            one(
                "bench-max-time",
                "bench_max_time",
                self.bench_max_time.as_ref(),
            ),
            one("max-pinned", "max_pinned", self.max_pinned.as_ref()),
            one("timeout", "timeout", self.timeout.as_ref()),
            one("keep-alive", "keep_alive", self.keep_alive.as_ref()),
            one(
                "keep-max-time",
                "keep_max_time",
                self.keep_max_time.as_ref(),
            ),
            one("max-clients", "max_clients", self.max_clients.as_ref()),
            one("max-per-ip", "max_per_ip", self.max_per_ip.as_ref()),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(allow) = &self.allow {
            out.push(Setting {
                key: "allow",
                id: "allow",
                span: allow.span(),
                values: allow.get_ref().iter().map(OsString::from).collect(),
            });
        }
        if let Some(t) = &self.token_file {
            out.push(Setting {
                key: "token-file",
                id: "token_file",
                span: t.span(),
                values: vec![t.get_ref().clone().into_os_string()],
            });
        }
        out
    }
}

/// The arguments this process was started with, with `--config`'s file applied under them.
/// Without `--config`, `args` as they are.
///
/// # Errors
/// [`ConfigError`] when the file cannot be read, or has an unknown key or a bad value.
pub fn apply(args: Args) -> Result<Args, ConfigError> {
    if args.config.is_none() {
        return Ok(args);
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    let token_env = std::env::var_os(crate::access::TOKEN_ENV).is_some();
    resolve(&argv, token_env, |p| std::fs::read_to_string(p))
}

/// [`apply`] over an explicit command line: `argv` (program name first), whether the token's
/// environment variable is set, and how to read the file.
fn resolve(
    argv: &[OsString],
    token_env: bool,
    read: impl FnOnce(&Path) -> std::io::Result<String>,
) -> Result<Args, ConfigError> {
    let cmd = Args::command();
    // These parses repeat one that already succeeded (main's), so they cannot fail on the
    // command line itself; any failure left is the file's and is reported against it.
    let matches = cmd
        .clone()
        .try_get_matches_from(argv)
        .map_err(|e| invalid_cli(&e))?;
    let Some(path) = matches.get_one::<PathBuf>("config").cloned() else {
        return Args::from_arg_matches(&matches).map_err(|e| invalid_cli(&e));
    };
    let shown = path.display().to_string();
    let text = read(&path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    let file: FileSettings = toml::from_str(&text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        located(&shown, &text, span, None, e.message().to_owned())
    })?;
    let program = argv
        .first()
        .cloned()
        .unwrap_or_else(|| "rdma-server".into());
    let mut merged = vec![program.clone()];
    for s in file.settings() {
        let explicit = matches!(
            matches.value_source(s.id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) || (s.id == "token_file" && token_env);
        if explicit {
            continue;
        }
        let mut flag_args = Vec::new();
        for v in &s.values {
            flag_args.push(OsString::from(format!("--{}", s.key)));
            flag_args.push(v.clone());
        }
        // The flag's own parser judges the value: the same ranges and messages as on the
        // command line.
        let alone = std::iter::once(program.clone()).chain(flag_args.iter().cloned());
        if let Err(e) = cmd.clone().try_get_matches_from(alone) {
            return Err(located(&shown, &text, s.span, Some(s.key), first_line(&e)));
        }
        merged.extend(flag_args);
    }
    merged.extend(argv.iter().skip(1).cloned());
    Args::try_parse_from(&merged).map_err(|e| invalid_cli(&e))
}

/// A clap error that can only come from the combination (every piece parsed alone).
fn invalid_cli(e: &clap::Error) -> ConfigError {
    ConfigError::Invalid {
        path: "the command line with the configuration file".into(),
        line: 0,
        column: 0,
        key: None,
        message: first_line(e),
    }
}

/// clap's message without its `error: ` prefix and its help hint.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// An error at `span` of `text`: 1-based line and column, and the key of that line when the
/// caller does not know it (`key = value`: what is left of the `=`).
fn located(
    path: &str,
    text: &str,
    span: Range<usize>,
    key: Option<&str>,
    message: String,
) -> ConfigError {
    let start = span.start.min(text.len());
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..start].chars().count() + 1;
    let key = key.map(str::to_owned).or_else(|| {
        let line_text = text[line_start..].lines().next().unwrap_or_default();
        line_text
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_owned())
            .filter(|k| !k.is_empty() && !k.starts_with('#'))
    });
    ConfigError::Invalid {
        path: path.to_owned(),
        line,
        column,
        key,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("rdma-server")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn with_file(args: &[&str], text: &str) -> Result<Args, ConfigError> {
        let text = text.to_owned();
        resolve(&argv(args), false, move |_| Ok(text))
    }

    const FILE: &str = r#"
# a comment
listen = "10.0.0.1:7000"
ib-dev = "rxe0"
gid-idx = 1
tclass = 106
hop-limit = 8
qp-timeout = 18
buffer-size = 4096
bench-max-bytes = 1048576
bench-max-time = "30s"
max-pinned = 67108864
timeout = "3s"
keep-max-time = "5m"
max-clients = 4
max-per-ip = 2
allow = ["10.0.0.0/24", "fd00::/8"]
token-file = "/etc/rdma-server/token"
"#;

    #[test]
    fn the_file_fills_what_the_command_line_leaves_out() {
        let a = with_file(&["--config", "/etc/x.toml"], FILE).unwrap();
        assert_eq!(a.listen, "10.0.0.1:7000".parse().unwrap());
        assert_eq!(a.local.device.as_deref(), Some("rxe0"));
        assert_eq!(a.local.gid_index, Some(1));
        assert_eq!(a.local.port, 1, "a key left out keeps the flag's default");
        assert_eq!((a.local.tclass, a.local.hop_limit, a.local.sl), (106, 8, 0));
        assert_eq!(a.local.qp_timeout, 18);
        assert_eq!(a.buffer_size, 4096);
        assert_eq!(a.bench_max_bytes, 1 << 20);
        assert_eq!(a.bench_max_time, Duration::from_secs(30));
        assert_eq!(a.max_pinned, 64 << 20);
        assert_eq!(a.timeout, Duration::from_secs(3));
        assert_eq!(a.keep_max_time, Duration::from_secs(300));
        assert_eq!(a.max_clients, 4);
        assert_eq!(a.max_per_ip, 2);
        assert_eq!(a.allow.len(), 2);
        assert_eq!(
            a.token_file.as_deref(),
            Some(Path::new("/etc/rdma-server/token"))
        );
    }

    /// Every key is spelt as its flag (without the dashes) and sets that flag; the flags'
    /// hidden aliases are the keys' too.
    #[test]
    fn every_key_is_its_flag() {
        let all = format!("{FILE}ib-port = 2\nsl = 3\ncq-mode = \"poll\"\nkeep-alive = \"5s\"\n");
        let file: FileSettings = toml::from_str(&all).unwrap();
        let cmd = Args::command();
        let settings = file.settings();
        assert_eq!(settings.len(), 20, "every key of the file");
        for s in &settings {
            assert!(
                cmd.get_arguments()
                    .any(|a| a.get_long() == Some(s.key) && a.get_id() == s.id),
                "key {} is not the flag --{} (id {})",
                s.key,
                s.key,
                s.id
            );
        }
        let a = with_file(&["--config", "x"], &all).unwrap();
        assert_eq!((a.local.port, a.local.sl), (2, 3));
        let old = with_file(&["--config", "x"], "device = \"mlx5_1\"\ngid-index = 3\n").unwrap();
        assert_eq!(
            (old.local.device.as_deref(), old.local.gid_index),
            (Some("mlx5_1"), Some(3))
        );
        let cli =
            Args::try_parse_from(["rdma-server", "--device", "d", "--gid-index", "2"]).unwrap();
        assert_eq!(
            (cli.local.device.as_deref(), cli.local.gid_index),
            (Some("d"), Some(2))
        );
        let short = Args::try_parse_from(["rdma-server", "-d", "d", "-i", "2", "-g", "1"]).unwrap();
        assert_eq!((short.local.port, short.local.gid_index), (2, Some(1)));
    }

    #[test]
    fn flags_override_the_file_even_when_they_repeat_the_default() {
        let a = with_file(
            &[
                "--config",
                "x.toml",
                "--buffer-size",
                "64",
                "--allow",
                "192.0.2.0/24",
                "--ib-dev=mlx5_0",
                "--serve",
            ],
            FILE,
        )
        .unwrap();
        // 64 is also the flag's default: only where the value came from matters.
        assert_eq!(a.buffer_size, 64);
        assert_eq!(a.allow, vec!["192.0.2.0/24".parse().unwrap()]);
        assert_eq!(a.local.device.as_deref(), Some("mlx5_0"));
        assert!(a.serve);
        assert_eq!(
            a.max_clients, 4,
            "untouched settings still come from the file"
        );
    }

    #[test]
    fn the_token_environment_variable_overrides_the_files_token_file() {
        let text = FILE.to_owned();
        let a = resolve(&argv(&["--config", "x"]), true, move |_| Ok(text)).unwrap();
        assert_eq!(a.token_file, None);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_file_line_and_key() {
        let cases = [
            (
                "listen = \"0.0.0.0:7471\"\nbufer-size = 10\n",
                2,
                "bufer-size",
                "unknown field",
            ),
            (
                "\n\nbuffer-size = 0\n",
                3,
                "buffer-size",
                "0 is not in 1..=1073741824",
            ),
            ("max-clients = \"many\"\n", 1, "max-clients", "invalid type"),
            ("timeout = \"soon\"\n", 1, "timeout", "invalid value 'soon'"),
            ("allow = [\"10.0.0.0/33\"]\n", 1, "allow", "invalid value"),
            ("ib-port = 300\n", 1, "ib-port", ""),
            ("port = 1\n", 1, "port", "unknown field"),
            ("cq-mode = \"spin\"\n", 1, "cq-mode", "spin"),
            (
                "bench-max-bytes = 2147483648\n",
                1,
                "bench-max-bytes",
                "not in 0..=1073741824",
            ),
            (
                "bench-max-time = \"0s\"\n",
                1,
                "bench-max-time",
                "longer than zero",
            ),
        ];
        for (text, line, key, words) in cases {
            let err =
                with_file(&["--config", "/etc/rdma-server/rdma-server.toml"], text).unwrap_err();
            let shown = err.to_string();
            match &err {
                ConfigError::Invalid {
                    line: l, key: k, ..
                } => {
                    assert_eq!(*l, line, "{shown}");
                    assert_eq!(k.as_deref(), Some(key), "{shown}");
                }
                ConfigError::Read { .. } => panic!("{shown}"),
            }
            assert!(
                shown.starts_with(&format!("/etc/rdma-server/rdma-server.toml, line {line}")),
                "{shown}"
            );
            assert!(shown.contains(words), "{shown}");
        }
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let err = with_file(
            &["--config", "c.toml"],
            "listen = \"0.0.0.0:7471\"\nmax-clients = \n",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("c.toml, line 2"), "{err}");
    }

    #[test]
    fn an_unreadable_file_says_so() {
        let err = resolve(&argv(&["--config", "/nope.toml"]), false, |_| {
            Err(std::io::ErrorKind::NotFound.into())
        })
        .unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(err.to_string().contains("/nope.toml"), "{err}");
    }

    #[test]
    fn without_config_the_arguments_are_untouched() {
        let a = resolve(&argv(&["--buffer-size", "128"]), false, |_| {
            panic!("no file to read")
        })
        .unwrap();
        assert_eq!(a.buffer_size, 128);
    }

    #[test]
    fn the_packaged_default_configuration_is_valid() {
        let text = include_str!("../pkg/rdma-server.toml").to_owned();
        let a = resolve(&argv(&["--config", PACKAGED]), false, move |_| Ok(text)).unwrap();
        assert_eq!(
            a.token_file.as_deref(),
            Some(Path::new("/etc/rdma-server/token"))
        );
        assert_eq!(a.listen.port(), 7471);
    }

    /// Issue 16, item 4: the packaged unit's bounded lock limit covers the packaged
    /// configuration's whole pinned-memory budget plus the queues, so the budget is never cut
    /// under systemd; MemoryMax is above it and TasksMax above max-clients.
    #[test]
    fn the_packaged_unit_covers_the_packaged_budget() {
        let text = include_str!("../pkg/rdma-server.toml").to_owned();
        let a = resolve(&argv(&["--config", PACKAGED]), false, move |_| Ok(text)).unwrap();
        let unit = include_str!("../pkg/debian/rdma-server.service");
        let key = |k: &str| {
            unit.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("the unit has no {k}="))
                .trim()
        };
        let mib = |v: &str| -> u64 {
            v.strip_suffix('M')
                .and_then(|n| n.parse::<u64>().ok())
                .map(|n| n << 20)
                .unwrap_or_else(|| panic!("not a size in M: {v}"))
        };
        let memlock = mib(key("LimitMEMLOCK"));
        assert!(
            memlock >= a.max_pinned + crate::budget::QUEUE_SLACK,
            "LimitMEMLOCK {memlock} < max-pinned {} + queues",
            a.max_pinned
        );
        assert!(mib(key("MemoryMax")) > memlock);
        assert!(key("TasksMax").parse::<u32>().unwrap() > a.max_clients + 1);
        assert!(
            crate::budget::bench_session(a.bench_max_bytes, true) <= a.max_pinned,
            "a lat session at the packaged bench cap must fit the packaged budget"
        );
    }
}
