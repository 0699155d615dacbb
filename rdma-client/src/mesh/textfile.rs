//! `--metrics-textfile PATH`: the exposition for node_exporter's textfile collector, in
//! Prometheus's text format 0.0.4, replaced atomically: written to a temporary file in the same
//! directory, synced, then renamed over `PATH`, so that a reader sees the old file or the new
//! one, never a part of either.

use super::metrics::{Format, MeshMetrics};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why the textfile could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TextfileError {
    /// node_exporter reads only `*.prom` files.
    #[error(
        "{}: node_exporter's textfile collector reads only files named *.prom; name it e.g. rdma_mesh.prom",
        .0.display()
    )]
    NotProm(PathBuf),
    /// The path has no directory or file name to write beside.
    #[error("{}: not a file path (give e.g. /var/lib/prometheus/node-exporter/rdma_mesh.prom)", .0.display())]
    NoFileName(PathBuf),
    /// Creating, writing, syncing or renaming failed.
    #[error(
        "writing the metrics textfile {} ({step}): {source}; the directory must exist and be writable by this user (node_exporter's --collector.textfile.directory)",
        path.display()
    )]
    Io {
        /// The textfile.
        path: PathBuf,
        /// Which step failed.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Where the textfile goes, checked once.
#[derive(Clone, Debug)]
pub struct Textfile {
    path: PathBuf,
    dir: PathBuf,
}

impl Textfile {
    /// Checks that `path` names a `*.prom` file (its directory is checked by each write).
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, TextfileError> {
        let path = path.into();
        let Some(name) = path.file_name() else {
            return Err(TextfileError::NoFileName(path));
        };
        if Path::new(name).extension().is_none_or(|e| e != "prom") {
            return Err(TextfileError::NotProm(path));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        Ok(Self { path, dir })
    }

    /// The textfile's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `metrics`' exposition (text format 0.0.4) atomically.
    pub fn write(&self, metrics: &MeshMetrics) -> Result<(), TextfileError> {
        self.write_bytes(metrics.encode(Format::Text).as_bytes())
    }

    /// Replaces the textfile with `bytes` atomically. The temporary file starts with a dot
    /// and does not end in `.prom`, so the collector never reads it.
    pub fn write_bytes(&self, bytes: &[u8]) -> Result<(), TextfileError> {
        let io = |step: &'static str| {
            let path = self.path.clone();
            move |source| TextfileError::Io { path, step, source }
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(".rdma_mesh.")
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(io("creating a temporary file beside it"))?;
        tmp.write_all(bytes).map_err(io("writing"))?;
        // node_exporter reads it as its own user: the usual mode of a textfile.
        set_readable(tmp.as_file()).map_err(io("making it readable"))?;
        tmp.as_file().sync_all().map_err(io("syncing"))?;
        tmp.persist(&self.path)
            .map_err(|e| io("renaming it into place")(e.error))?;
        Ok(())
    }
}

#[cfg(unix)]
fn set_readable(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn set_readable(_: &std::fs::File) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn only_prom_files_and_the_error_names_the_path() {
        let e = Textfile::new("/tmp/x/metrics.txt").unwrap_err().to_string();
        assert!(
            e.contains("/tmp/x/metrics.txt") && e.contains("*.prom"),
            "{e}"
        );
        assert!(Textfile::new("/").is_err());
        assert!(Textfile::new("rdma_mesh.prom").is_ok());
        let missing = Textfile::new("/nonexistent-dir-of-rdma-mesh/rdma_mesh.prom").unwrap();
        let e = missing.write_bytes(b"x 1\n").unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent-dir-of-rdma-mesh/rdma_mesh.prom")
                && e.contains("must exist and be writable"),
            "{e}"
        );
    }

    /// A reader polling the file while it is rewritten sees one whole version or another,
    /// never a mix or a truncated one, and no temporary file stays behind.
    #[test]
    fn a_reader_never_sees_a_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let tf = Textfile::new(dir.path().join("rdma_mesh.prom")).unwrap();
        // Large enough that a non-atomic write would be seen half done.
        let versions: Vec<String> = (0..4)
            .map(|v| {
                format!("# v{v}\n") + &format!("rdma_mesh_x{{v=\"{v}\"}} {v}\n").repeat(20_000)
            })
            .collect();
        tf.write_bytes(versions[0].as_bytes()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, path, versions) = (stop.clone(), tf.path().to_owned(), versions.clone());
            std::thread::spawn(move || {
                let mut reads = 0u32;
                let deadline = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let got = std::fs::read_to_string(&path).unwrap();
                    assert!(
                        versions.contains(&got),
                        "a partial file ({} bytes)",
                        got.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..40 {
            tf.write_bytes(versions[i % versions.len()].as_bytes())
                .unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["rdma_mesh.prom"]);
    }
}
