//! `--generate KIND`: a binary prints its own man page or a shell completion script, made
//! from its clap definition (as ripgrep does). Packaging calls it (`cargo xtask dist`); it is
//! not in `--help`, and it is looked for before the command line is parsed, so a binary with
//! a required argument answers it too.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// What `--generate` can print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// roff man page, section 1.
    Man,
    /// bash completion script.
    CompleteBash,
    /// zsh completion script (`_NAME`).
    CompleteZsh,
    /// fish completion script.
    CompleteFish,
}

impl Kind {
    /// Every kind, with its name on the command line.
    pub const ALL: [(Kind, &'static str); 4] = [
        (Kind::Man, "man"),
        (Kind::CompleteBash, "complete-bash"),
        (Kind::CompleteZsh, "complete-zsh"),
        (Kind::CompleteFish, "complete-fish"),
    ];

    /// The kind called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
    }
}

/// `Some` when the command line is `PROGRAM --generate KIND` (or `--generate=KIND`): the kind,
/// or the unknown name.
pub fn requested(argv: &[OsString]) -> Option<Result<Kind, String>> {
    let first = argv.get(1)?.to_str()?;
    let name = match first.strip_prefix("--generate") {
        Some("") => argv.get(2).and_then(|a| a.to_str()).unwrap_or_default(),
        Some(rest) => rest.strip_prefix('=')?,
        None => return None,
    };
    Some(Kind::from_name(name).ok_or_else(|| name.to_owned()))
}

/// Writes `kind` for `cmd` to `out`.
///
/// # Errors
/// When `out` cannot be written.
pub fn render(mut cmd: clap::Command, kind: Kind, out: &mut dyn Write) -> std::io::Result<()> {
    use clap_complete::Shell;
    let name = cmd.get_name().to_owned();
    let shell = match kind {
        Kind::Man => return man(cmd, out),
        Kind::CompleteBash => Shell::Bash,
        Kind::CompleteZsh => Shell::Zsh,
        Kind::CompleteFish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, name, out);
    Ok(())
}

/// The man page: clap_mangen's sections, then one per subcommand (its description, synopsis
/// and options: `rdma-client bench`, `rdma-client fabric report`, ...), with the exit-code
/// table (the command's long `after_help`, else its `after_help`) as the EXIT STATUS section a
/// man reader looks for.
fn man(cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let after = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(ToString::to_string);
    let versioned = cmd.get_version().is_some();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    let mut options = Vec::new();
    man.render_options_section(&mut options)?;
    out.write_all(one_header_each(&String::from_utf8_lossy(&options)).as_bytes())?;
    subcommand_sections(&cmd, cmd.get_name(), out)?;
    if let Some(text) = after {
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim_end().ends_with(':') && l.starts_with("Exit"))
            .collect();
        writeln!(out, ".SH \"EXIT STATUS\"\n.nf")?;
        for line in body {
            writeln!(out, "{}", roff_escape(line))?;
        }
        writeln!(out, ".fi")?;
    }
    if versioned {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// A section for each subcommand of `cmd` (called `name` on the command line), and theirs.
fn subcommand_sections(
    cmd: &clap::Command,
    name: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let full = format!("{name} {}", sub.get_name());
        writeln!(out, ".SH \"{}\"", full.to_uppercase())?;
        let man = clap_mangen::Man::new(sub.clone().bin_name(full.clone()));
        let mut text = Vec::new();
        man.render_description_section(&mut text)?;
        man.render_synopsis_section(&mut text)?;
        man.render_options_section(&mut text)?;
        let text = one_header_each(&String::from_utf8_lossy(&text)).replace("\n.SH ", "\n.SS ");
        let text = text
            .strip_prefix(".SH ")
            .map_or(text.clone(), |t| format!(".SS {t}"));
        out.write_all(text.as_bytes())?;
        subcommand_sections(sub, &full, out)?;
    }
    Ok(())
}

/// roff text without a section header that repeats the one before it (clap_mangen heads the
/// arguments without a heading and those under "Options" alike, one after the other).
fn one_header_each(text: &str) -> String {
    let mut last = None;
    let mut kept = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if line.starts_with(".SH ") {
            if last == Some(line) {
                continue;
            }
            last = Some(line);
        }
        kept.push_str(line);
    }
    kept
}

/// A line of text for roff: backslashes and dashes escaped, a leading `.` or `'` neutralised.
fn roff_escape(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// Answers `--generate KIND` for `A` if that is what the command line asks: `Some(exit code)`
/// when it did (the caller returns it), `None` to go on as usual.
pub fn if_asked<A: clap::CommandFactory>() -> Option<ExitCode> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let kind = match requested(&argv)? {
        Ok(kind) => kind,
        Err(name) => {
            let known: Vec<&str> = Kind::ALL.iter().map(|(_, n)| *n).collect();
            eprintln!(
                "error: --generate {name:?}: expected one of {}",
                known.join(", ")
            );
            return Some(super::Exit::Usage.into());
        }
    };
    let mut stdout = std::io::stdout().lock();
    match render(A::command(), kind, &mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: writing the {kind:?} output: {e}");
            Some(super::Exit::Internal.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn sample() -> clap::Command {
        clap::Command::new("rdma-sample")
            .about("A sample")
            .arg(clap::Arg::new("server").required(true))
            .arg(clap::Arg::new("timeout").long("timeout").help("Deadline"))
            .after_help("Exit codes:\n  0  fine")
    }

    #[test]
    fn the_flag_is_found_before_parsing() {
        assert_eq!(
            requested(&argv(&["x", "--generate", "man"])),
            Some(Ok(Kind::Man))
        );
        assert_eq!(
            requested(&argv(&["x", "--generate=complete-zsh"])),
            Some(Ok(Kind::CompleteZsh))
        );
        assert_eq!(
            requested(&argv(&["x", "--generate", "pdf"])),
            Some(Err("pdf".to_owned()))
        );
        assert_eq!(
            requested(&argv(&["x", "--generate"])),
            Some(Err(String::new()))
        );
        assert_eq!(
            requested(&argv(&["x", "10.0.0.1", "--generate", "man"])),
            None
        );
        assert_eq!(requested(&argv(&["x", "--generated"])), None);
        assert_eq!(requested(&argv(&["x"])), None);
    }

    #[test]
    fn each_kind_renders_the_commands_flags() {
        for (kind, name) in Kind::ALL {
            let mut out = Vec::new();
            render(sample(), kind, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("timeout"), "{name}: {text}");
            let marker = match kind {
                Kind::Man => ".TH rdma-sample 1",
                Kind::CompleteBash => "complete -F",
                Kind::CompleteZsh => "#compdef rdma-sample",
                Kind::CompleteFish => "complete -c rdma-sample",
            };
            assert!(text.contains(marker), "{name}: {text}");
        }
        let mut out = Vec::new();
        render(sample(), Kind::Man, &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(
            page.contains(".SH \"EXIT STATUS\"\n.nf\n  0  fine\n.fi"),
            "{page}"
        );
        assert_eq!(roff_escape(".x -y \\z"), "\\&.x \\-y \\ez");
        assert_eq!(
            one_header_each(".SH OPTIONS\na\n.SH OPTIONS\nb\n.SH DEVICE\nc\n.SH OPTIONS\n"),
            ".SH OPTIONS\na\nb\n.SH DEVICE\nc\n.SH OPTIONS\n"
        );
        // Each subcommand has its section, with its own options.
        let nested = sample().subcommand(
            clap::Command::new("bench")
                .about("Measure")
                .arg(clap::Arg::new("mode").long("mode").help("lat or bw"))
                .subcommand(clap::Command::new("deep").arg(clap::Arg::new("x").long("deeper"))),
        );
        let mut out = Vec::new();
        render(nested, Kind::Man, &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(page.contains(".SH \"RDMA-SAMPLE BENCH\""), "{page}");
        assert!(
            page.contains("\\-\\-mode") && page.contains("\\-\\-deeper"),
            "{page}"
        );
        assert!(page.contains(".SH \"RDMA-SAMPLE BENCH DEEP\""), "{page}");
        assert!(
            !page[page.find("RDMA-SAMPLE BENCH").unwrap_or(0)..].contains(".SH SYNOPSIS"),
            "{page}"
        );
    }
}
