//! Who may use the server: client address allow-list and the shared access token.

use ipnet::IpNet;
use std::net::IpAddr;
use std::path::Path;

/// Environment variable that may hold the shared token instead of `--token-file`.
pub const TOKEN_ENV: &str = "RDMA_WRITE_TOKEN";

/// A problem with the access-control configuration (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "cannot read the token file {path}: {source}. Create it with e.g. `head -c 32 /dev/urandom | base64 > {path}`"
    )]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the access token from {0} is empty: put at least 16 characters in it, or drop the option to serve without a token"
    )]
    EmptyToken(String),
    #[error(
        "the access token from {from} is not valid UTF-8 text: use printable characters (base64 is fine)"
    )]
    TokenNotText { from: String },
}

/// Loads the token from `--token-file`, else from `$RDMA_WRITE_TOKEN`; `None` when neither is set.
pub fn load_token(file: Option<&Path>) -> Result<Option<String>, AccessError> {
    let (raw, from) = match file {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| AccessError::TokenFile {
                path: path.display().to_string(),
                source,
            })?;
            (bytes, path.display().to_string())
        }
        None => match std::env::var_os(TOKEN_ENV) {
            Some(v) => (v.into_encoded_bytes(), format!("${TOKEN_ENV}")),
            None => return Ok(None),
        },
    };
    let text =
        String::from_utf8(raw).map_err(|_| AccessError::TokenNotText { from: from.clone() })?;
    let token = text.trim_end_matches(['\r', '\n']).to_owned();
    if token.is_empty() {
        return Err(AccessError::EmptyToken(from));
    }
    Ok(Some(token))
}

/// Whether a client address passes `--allow` (an empty list allows everyone).
pub fn allowed(allow: &[IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    allow.is_empty() || allow.iter().any(|net| net.contains(&peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn allow_list_matches_networks_and_mapped_addresses() {
        let nets: Vec<IpNet> = vec!["10.0.0.0/24".parse().unwrap(), "fd00::/8".parse().unwrap()];
        assert!(allowed(&nets, "10.0.0.7".parse().unwrap()));
        assert!(allowed(&nets, "::ffff:10.0.0.7".parse().unwrap()));
        assert!(allowed(&nets, "fd12::1".parse().unwrap()));
        assert!(!allowed(&nets, "10.0.1.7".parse().unwrap()));
        assert!(!allowed(&nets, "127.0.0.1".parse().unwrap()));
        assert!(allowed(&[], "192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn token_file_is_trimmed_and_checked() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "s3cret-token-0123").unwrap();
        assert_eq!(
            load_token(Some(f.path())).unwrap().as_deref(),
            Some("s3cret-token-0123")
        );

        let empty = tempfile::NamedTempFile::new().unwrap();
        let err = load_token(Some(empty.path())).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");

        let err = load_token(Some(Path::new("/nonexistent/token"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/token"), "{err}");
    }
}
