//! The input files scenarios read (a 1 MiB payload, a token file), written where the guests
//! see them too.

use super::scenarios;
use crate::vm;
use color_eyre::eyre::{Result, WrapErr as _, eyre};
use std::path::PathBuf;

/// Files the scenarios read, under target/ so that guests (which see the host root) read
/// them too; `{payload}` and `{token_file}` in scenario arguments expand to their paths.
#[derive(Debug, Clone)]
pub(super) struct Files {
    pub payload: String,
    pub token_file: String,
}

impl Files {
    pub fn write() -> Result<Self> {
        let dir = vm::xtask_dir().join("e2e");
        std::fs::create_dir_all(&dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
        let payload = dir.join(scenarios::ONE_MIB_FILE);
        if std::fs::metadata(&payload).map(|m| m.len()).ok() != Some(1 << 20) {
            let mut bytes = vec![0u8; 1 << 20];
            fastrand::fill(&mut bytes);
            std::fs::write(&payload, bytes)
                .wrap_err_with(|| format!("writing {}", payload.display()))?;
        }
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{}\n", scenarios::TOKEN))
            .wrap_err_with(|| format!("writing {}", token_file.display()))?;
        // Both binaries refuse a token file that others can read (as ssh does a private key).
        std::fs::set_permissions(
            &token_file,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
        )
        .wrap_err_with(|| format!("making {} private", token_file.display()))?;
        let utf8 = |p: PathBuf| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
        };
        Ok(Self {
            payload: utf8(payload)?,
            token_file: utf8(token_file)?,
        })
    }

    /// `arg` with the placeholders replaced by the paths.
    pub fn expand(&self, arg: &str) -> String {
        arg.replace(scenarios::PAYLOAD, &self.payload)
            .replace(scenarios::TOKEN_FILE, &self.token_file)
    }
}

#[cfg(test)]
impl Files {
    /// `/p.bin` and `/t`.
    pub fn for_tests() -> Self {
        Self {
            payload: "/p.bin".into(),
            token_file: "/t".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_to_the_paths() {
        let f = Files::for_tests();
        assert_eq!(f.expand(scenarios::PAYLOAD), "/p.bin");
        assert_eq!(f.expand(scenarios::TOKEN_FILE), "/t");
        assert_eq!(f.expand("--file"), "--file");
    }
}
