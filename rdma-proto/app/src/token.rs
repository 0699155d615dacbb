//! The shared access token, as both binaries read it: from a file that only its owner can
//! read (as ssh insists for a private key), else from `RDMA_WRITE_TOKEN`. Never from the
//! command line by choice: every user on the machine sees a process's arguments in `ps`.

use std::path::Path;

/// Environment variable that may hold the shared token instead of a token file.
pub const TOKEN_ENV: &str = "RDMA_WRITE_TOKEN";
/// The shortest token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;
/// The most a token file may hold, in bytes (a device like `/dev/zero` is not read forever).
pub const MAX_TOKEN_BYTES: u64 = 4096;

/// A token that cannot be used (a usage error: exit code 2 in both binaries).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error(
        "cannot read the token file {path}: {source}. Create it with e.g. `(umask 077; head -c 32 /dev/urandom | base64 > {path})`"
    )]
    TokenFile {
        /// The file.
        path: String,
        /// Why not.
        source: std::io::Error,
    },
    /// Group or others have access to the file.
    #[error(
        "the token file {path} is open to other users (mode {mode:04o}): anyone on this machine could read the secret. Run `chmod 600 {path}` (as its owner), or rotate the token if it was exposed"
    )]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The token is empty.
    #[error(
        "the access token from {0} is empty: put at least 16 characters in it, or drop the option to go without a token"
    )]
    EmptyToken(String),
    /// The token is shorter than [`MIN_TOKEN_CHARS`]: guessable.
    #[error(
        "the access token from {from} has {len} character(s): use at least {MIN_TOKEN_CHARS}, e.g. `head -c 32 /dev/urandom | base64`"
    )]
    TooShort {
        /// The file or variable it came from.
        from: String,
        /// Its length in characters.
        len: usize,
    },
    /// The file holds more than [`MAX_TOKEN_BYTES`]: not a token.
    #[error(
        "the token file {path} holds more than {MAX_TOKEN_BYTES} bytes: it is not a token file (a token is one line, e.g. 44 base64 characters)"
    )]
    TooLarge {
        /// The file.
        path: String,
    },
    /// The token is not UTF-8.
    #[error(
        "the access token from {from} is not valid UTF-8 text: use printable characters (base64 is fine)"
    )]
    TokenNotText {
        /// The file or variable it came from.
        from: String,
    },
}

/// Loads the token from `file`, else from `$RDMA_WRITE_TOKEN`; `None` when neither is set.
///
/// # Errors
/// [`TokenError`]: unreadable, open to others, empty, or not text.
pub fn load(file: Option<&Path>) -> Result<Option<String>, TokenError> {
    match file {
        Some(path) => read_file(path).map(Some),
        None => match std::env::var_os(TOKEN_ENV) {
            Some(v) => text(v.into_encoded_bytes(), format!("${TOKEN_ENV}")).map(Some),
            None => Ok(None),
        },
    }
}

/// Reads a token file, refusing one that group or others may access (an empty file, which
/// holds no secret, is refused as empty first).
///
/// The file is opened once; its mode comes from that open descriptor (`fstat`) and its bytes
/// from the same descriptor, so a file swapped between the check and the read is never used.
///
/// # Errors
/// [`TokenError`]: unreadable, empty, open to others, too short, too large, or not text.
pub fn read_file(path: &Path) -> Result<String, TokenError> {
    let shown = path.display().to_string();
    let unreadable = |source| TokenError::TokenFile {
        path: shown.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    read_open(file, shown)
}

/// [`read_file`] on a file already open: its mode (`fstat`) and its bytes from this one
/// descriptor. `shown` names it in errors.
fn read_open(file: std::fs::File, shown: String) -> Result<String, TokenError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let unreadable = |source| TokenError::TokenFile {
        path: shown.clone(),
        source,
    };
    let mode = file.metadata().map_err(unreadable)?.permissions().mode();
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLarge { path: shown });
    }
    if bytes.iter().all(|b| matches!(b, b'\r' | b'\n')) {
        return Err(TokenError::EmptyToken(shown));
    }
    if too_open(mode) {
        return Err(TokenError::TooOpen {
            path: shown,
            mode: mode & 0o7777,
        });
    }
    text(bytes, shown)
}

/// Whether permission bits let group or others at the file (any of read, write, execute).
#[must_use]
pub fn too_open(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// The token in `raw`: UTF-8, trailing newlines dropped, not empty, at least
/// [`MIN_TOKEN_CHARS`] characters.
fn text(raw: Vec<u8>, from: String) -> Result<String, TokenError> {
    let text =
        String::from_utf8(raw).map_err(|_| TokenError::TokenNotText { from: from.clone() })?;
    let token = text.trim_end_matches(['\r', '\n']).to_owned();
    if token.is_empty() {
        return Err(TokenError::EmptyToken(from));
    }
    let len = token.chars().count();
    if len < MIN_TOKEN_CHARS {
        return Err(TokenError::TooShort { from, len });
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;

    fn private_file(contents: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(contents).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        f
    }

    #[test]
    fn a_private_token_file_is_read_and_trimmed() {
        let f = private_file(b"s3cret-token-0123\n");
        assert_eq!(read_file(f.path()).unwrap(), "s3cret-token-0123");
        assert_eq!(
            load(Some(f.path())).unwrap().as_deref(),
            Some("s3cret-token-0123")
        );
    }

    #[test]
    fn a_file_others_can_read_is_refused_with_the_fix() {
        let f = private_file(b"s3cret-token-0123\n");
        for mode in [0o644, 0o640, 0o604, 0o620, 0o601] {
            std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let err = read_file(f.path()).unwrap_err();
            assert!(matches!(err, TokenError::TooOpen { .. }), "{mode:o}: {err}");
            let shown = err.to_string();
            assert!(
                shown.contains(&format!("chmod 600 {}", f.path().display()))
                    && shown.contains(&format!("{mode:04o}")),
                "{shown}"
            );
        }
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read_file(f.path()).is_ok());
        assert!(!too_open(0o600) && !too_open(0o100_600) && too_open(0o100_644));
    }

    #[test]
    fn empty_missing_or_binary_tokens_are_refused() {
        let empty = private_file(b"\n");
        assert!(matches!(
            read_file(empty.path()).unwrap_err(),
            TokenError::EmptyToken(_)
        ));
        // Nothing to leak: /dev/null (mode 0666) is reported as empty, not as open.
        assert!(matches!(
            read_file(Path::new("/dev/null")).unwrap_err(),
            TokenError::EmptyToken(_)
        ));
        let err = read_file(Path::new("/nonexistent/token")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/token"), "{err}");
        let binary = private_file(&[0xff; 20]);
        assert!(matches!(
            read_file(binary.path()).unwrap_err(),
            TokenError::TokenNotText { .. }
        ));
    }

    /// The error asks for 16 characters: fewer are refused, from a file or the variable
    /// (issue 16, item 7).
    #[test]
    fn short_tokens_are_refused() {
        for short in [&b"a"[..], b"a\n", b"0123456789abcde\n"] {
            let f = private_file(short);
            let err = read_file(f.path()).unwrap_err();
            assert!(
                matches!(err, TokenError::TooShort { .. }),
                "{short:?}: {err}"
            );
            assert!(err.to_string().contains("at least 16"), "{err}");
        }
        assert!(matches!(
            text(b"abc".to_vec(), format!("${TOKEN_ENV}")).unwrap_err(),
            TokenError::TooShort { len: 3, .. }
        ));
        let exact = private_file(b"0123456789abcdef\n");
        assert_eq!(read_file(exact.path()).unwrap(), "0123456789abcdef");
        // Characters, not bytes: 16 two-byte chars pass, 15 do not.
        assert!(text("é".repeat(16).into_bytes(), "x".into()).is_ok());
        assert!(text("é".repeat(15).into_bytes(), "x".into()).is_err());
    }

    /// A file larger than any token (or an endless device) is refused after a bounded read.
    #[test]
    fn huge_token_files_are_refused_after_a_bounded_read() {
        let big = private_file(&vec![b'a'; 5000]);
        assert!(matches!(
            read_file(big.path()).unwrap_err(),
            TokenError::TooLarge { .. }
        ));
        assert!(matches!(
            read_file(Path::new("/dev/zero")).unwrap_err(),
            TokenError::TooLarge { .. }
        ));
    }

    /// The mode checked is the mode of the file read: a private token file swapped for one
    /// others can read after it was opened is judged, and read, as the file that was opened;
    /// the path now names the open one, refused as such.
    #[test]
    fn the_mode_and_the_bytes_come_from_one_open_file() {
        let private = private_file(b"private-token-AAAA\n");
        let opened = std::fs::File::open(private.path()).unwrap();
        let open = private_file(b"open-token-BBBBBBBBB\n");
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::rename(open.path(), private.path()).unwrap();
        let shown = private.path().display().to_string();
        assert_eq!(read_open(opened, shown).unwrap(), "private-token-AAAA");
        assert!(matches!(
            read_file(private.path()).unwrap_err(),
            TokenError::TooOpen { .. }
        ));
    }
}
