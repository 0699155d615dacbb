//! The shared access token, as both binaries read it: from a file that only its owner can
//! read (as ssh insists for a private key), else from `RDMA_WRITE_TOKEN`. Never from the
//! command line by choice: every user on the machine sees a process's arguments in `ps`.
//!
//! A token file must be the file itself (not a symbolic link: whoever can change the link
//! could point it elsewhere), belong to this process's user or root, and be closed to group
//! and others. A token from the environment is taken out of it ([`take_env`]): the variable
//! and, in the process's initial environment block (what `/proc/PID/environ` shows to the
//! user's other processes and to root), its value's bytes.

use std::ffi::{OsString, c_char};
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
    /// The path is a symbolic link (refused: opened with `O_NOFOLLOW`).
    #[error(
        "the token file {path} is a symbolic link: refused, since whoever can change the link can point it at another file. Name the file itself (`readlink -f {path}` shows it; for a Kubernetes Secret volume, MOUNT/..data/KEY), or put the token file in its place"
    )]
    Symlink {
        /// The file.
        path: String,
    },
    /// The file belongs to neither this process's user nor root.
    #[error(
        "the token file {path} belongs to uid {owner}, not to this process's user (uid {euid}) or root: that user can change or read the token. Give it to this user with `chown {euid} {path}` (as root), or use a token file of its own"
    )]
    NotOwner {
        /// The file.
        path: String,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        euid: u32,
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
/// The variable, set or not used, is read with [`read_env`]: taken out of the environment
/// when this process has one thread.
///
/// # Errors
/// [`TokenError`]: unreadable, a symbolic link, another user's, open to others, empty, or not
/// text.
pub fn load(file: Option<&Path>) -> Result<Option<String>, TokenError> {
    let from_env = read_env();
    match file {
        Some(path) => read_file(path).map(Some),
        None => match from_env {
            Some(v) => text(v.into_encoded_bytes(), format!("${TOKEN_ENV}")).map(Some),
            None => Ok(None),
        },
    }
}

/// `$RDMA_WRITE_TOKEN`, taken out of the environment ([`take_env`]) when this process has
/// exactly one thread, and only read when it has more (or `/proc/self/task` cannot be read):
/// then no thread can be shown to keep clear of the environment, so it stays there.
///
/// Sound for every caller: with one thread there is no other to race, and only this one could
/// start another, which it does not before [`take_env`] returns.
#[must_use]
pub fn read_env() -> Option<OsString> {
    if threads() == Some(1) {
        // SAFETY: this process has one thread, the caller's (see the function's docs), so no
        // other thread reads or writes the environment during the call; the variable's
        // entry, if any, is writable memory: the initial environment block, or the copy
        // setenv(3) made (neither binary hands putenv(3) a string of its own).
        unsafe { take_env() }
    } else {
        std::env::var_os(TOKEN_ENV)
    }
}

/// The number of threads of this process (the entries of `/proc/self/task`), when readable.
fn threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut n = 0;
    for task in tasks {
        task.ok()?;
        n += 1;
    }
    Some(n)
}

unsafe extern "C" {
    /// The C library's environment: a null-terminated array of `NAME=value` strings (POSIX).
    static mut environ: *mut *mut c_char;
}

/// Takes `$RDMA_WRITE_TOKEN` out of this process's environment and returns it: first its
/// value is overwritten with zero bytes where it lies (for a variable the process was started
/// with, in its initial environment block, which is what `/proc/PID/environ` reads and what
/// unsetenv(3) leaves as it was), then the variable is removed (`getenv` no longer finds it,
/// and child processes do not inherit it). `None` when it is not set.
///
/// What it cannot reach: copies made before the call (a value set again with setenv(3)
/// leaves its first bytes in the initial block; a string read from the environment earlier).
///
/// # Safety
/// For the whole call, no other thread may read or write the environment (through `std::env`
/// or the C library: getenv, setenv, the resolver, ...). Call it from `main` before any thread
/// is started, or use [`read_env`], which checks that the process has one thread. Each entry
/// of the variable must be writable memory: entries of the initial environment and those
/// setenv(3) made are; a read-only string handed to putenv(3) is not.
pub unsafe fn take_env() -> Option<OsString> {
    let value = std::env::var_os(TOKEN_ENV)?;
    let prefix = format!("{TOKEN_ENV}=");
    // SAFETY: no other thread touches the environment (the caller's contract), so `environ`
    // and the strings it points to stay as they are during this loop: a null-terminated array
    // of pointers to NUL-terminated strings (POSIX). Each string read is measured before it is
    // written; the bytes written, its value's, lie inside it (before its NUL) and are writable
    // (the caller's contract). Zeros end the value at its first byte: the entry reads
    // `RDMA_WRITE_TOKEN=` until removed below.
    unsafe {
        let mut entry = (&raw const environ).read();
        while !entry.is_null() && !(*entry).is_null() {
            let string = *entry;
            let (ours, len) = {
                let bytes = std::ffi::CStr::from_ptr(string).to_bytes();
                (bytes.starts_with(prefix.as_bytes()), bytes.len())
            };
            if ours {
                std::ptr::write_bytes(string.add(prefix.len()), 0, len - prefix.len());
            }
            entry = entry.add(1);
        }
    }
    // SAFETY: no other thread reads or writes the environment (the caller's contract).
    unsafe { std::env::remove_var(TOKEN_ENV) };
    Some(value)
}

/// Reads a token file, refusing a symbolic link, a file of another user than this process's
/// (or root), and one that group or others may access (an empty file, which holds no secret,
/// is refused as empty first).
///
/// The file is opened once, with `O_NOFOLLOW` (a link as the last component fails the open);
/// its owner and mode come from that open descriptor (`fstat`) and its bytes from the same
/// descriptor, so a file swapped between the check and the read is never used.
///
/// # Errors
/// [`TokenError`]: unreadable, a symbolic link, another user's, empty, open to others, too
/// short, too large, or not text.
pub fn read_file(path: &Path) -> Result<String, TokenError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let shown = path.display().to_string();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ELOOP) {
                TokenError::Symlink {
                    path: shown.clone(),
                }
            } else {
                TokenError::TokenFile {
                    path: shown.clone(),
                    source,
                }
            }
        })?;
    read_open(file, shown)
}

/// [`read_file`] on a file already open: its mode (`fstat`) and its bytes from this one
/// descriptor. `shown` names it in errors.
fn read_open(file: std::fs::File, shown: String) -> Result<String, TokenError> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let unreadable = |source| TokenError::TokenFile {
        path: shown.clone(),
        source,
    };
    let meta = file.metadata().map_err(unreadable)?;
    let (mode, owner) = (meta.mode(), meta.uid());
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
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if owner != euid && owner != 0 {
        return Err(TokenError::NotOwner {
            path: shown,
            owner,
            euid,
        });
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

    /// Security review: a token file that is a symbolic link is refused (opened with
    /// O_NOFOLLOW), naming the path and what to name instead; the file it points to is fine.
    #[test]
    fn a_symlinked_token_file_is_refused() {
        let target = private_file(b"s3cret-token-0123\n");
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("token");
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let err = read_file(&link).unwrap_err();
        assert!(matches!(err, TokenError::Symlink { .. }), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains(&link.display().to_string()) && shown.contains("..data/"),
            "{shown}"
        );
        assert!(read_file(target.path()).is_ok());
    }

    /// Security review: a token file of another user is refused, naming its owner and the fix;
    /// one of this user (or root) is read. Needs root to give a file away (CI runs as root).
    #[test]
    fn a_token_file_of_another_owner_is_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            eprintln!("not root: cannot give a file to uid 65534; only root's runs check this");
            return;
        }
        let f = private_file(b"s3cret-token-0123\n");
        std::os::unix::fs::chown(f.path(), Some(65534), None).unwrap();
        let err = read_file(f.path()).unwrap_err();
        assert!(
            matches!(
                err,
                TokenError::NotOwner {
                    owner: 65534,
                    euid: 0,
                    ..
                }
            ),
            "{err}"
        );
        let shown = err.to_string();
        assert!(
            shown.contains("uid 65534")
                && shown.contains(&format!("chown 0 {}", f.path().display())),
            "{shown}"
        );
        std::os::unix::fs::chown(f.path(), Some(0), None).unwrap();
        assert_eq!(read_file(f.path()).unwrap(), "s3cret-token-0123");
    }

    /// With more than one thread (libtest's), [`read_env`] only reads: no thread can be shown
    /// to keep clear of the environment.
    #[test]
    fn with_threads_running_the_environment_is_only_read() {
        assert!(threads().is_some_and(|n| n >= 2), "{:?}", threads());
        let before = std::env::var_os(TOKEN_ENV);
        assert_eq!(read_env(), before);
        assert_eq!(std::env::var_os(TOKEN_ENV), before);
    }

    /// Marks the child run of [`the_environment_token_leaves_proc_environ`].
    const SCRUB_CHILD: &str = "RDMA_APP_TOKEN_SCRUB_CHILD";

    /// Security review: a token taken from the environment no longer shows in
    /// /proc/PID/environ (the process's initial environment block, which unsetenv alone leaves
    /// as it was). Run in a child (this test binary, this one test) whose environment holds a
    /// token: libtest's threads share this process's environment.
    #[test]
    fn the_environment_token_leaves_proc_environ() {
        let token = format!("env-token-{}-0123456789", std::process::id());
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "token::tests::scrub_in_a_child",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(SCRUB_CHILD, "1")
            .env(TOKEN_ENV, &token)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("scrubbed in the child"),
            "{stdout}\n{stderr}"
        );
    }

    /// The child of [`the_environment_token_leaves_proc_environ`]; passes at once elsewhere.
    #[test]
    fn scrub_in_a_child() {
        if std::env::var_os(SCRUB_CHILD).is_none() {
            return;
        }
        let token = std::env::var(TOKEN_ENV).unwrap();
        let shown = || {
            let block = std::fs::read("/proc/self/environ").unwrap();
            block.windows(token.len()).any(|w| w == token.as_bytes())
        };
        assert!(
            shown(),
            "the token is not in /proc/self/environ to begin with"
        );
        // SAFETY: this process runs this one test (--exact, --test-threads=1): its only other
        // thread is libtest's main thread, which waits for this one and meanwhile touches no
        // environment; the variable came in the initial environment (writable stack memory).
        let taken = unsafe { take_env() };
        assert_eq!(taken.as_deref(), Some(std::ffi::OsStr::new(&token)));
        assert!(std::env::var_os(TOKEN_ENV).is_none());
        assert!(!shown(), "the token is still in /proc/self/environ");
        // SAFETY: as above.
        assert_eq!(unsafe { take_env() }, None);
        println!("scrubbed in the child");
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
