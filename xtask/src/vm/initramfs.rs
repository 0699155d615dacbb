//! The busybox initramfs: busybox-static, the module closure the guest needs, and `/init`
//! (`init.sh`, shipped in the binary). Cached as
//! `~/.cache/rdma-write/vm/initramfs-RELEASE-HASH.cpio`, keyed by kernel release, init script,
//! module list and busybox.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use xshell::{Shell, cmd};

use super::kernel::Kernel;
use crate::exec;

/// The guest's `/init`.
pub const INIT_SCRIPT: &str = include_str!("init.sh");

/// Modules the guest loads (dependencies are added from modules.dep). crc32_generic is not
/// a dependency of anything but rdma_rxe on 6.1 needs it at device creation.
pub const MODULES: &[&str] = &[
    "crc32_generic",
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "overlay",
    "ib_uverbs",
    "rdma_rxe",
    // `tc qdisc ... netem delay` (fabric-e2e slows one node's link), `netem loss` (vm-smoke's
    // lossy link).
    "sch_netem",
    // vm-smoke's lossy link drops every RoCE packet a node sends: a prio root, a u32 filter on
    // UDP 4791, the drop action.
    "sch_prio",
    "cls_u32",
    "act_gact",
];

/// Busybox in the initramfs.
pub const BUSYBOX: &str = "/bin/busybox";

/// `modules.dep`: module name -> (path relative to the modules dir, dependency paths).
#[derive(Debug, Default)]
pub struct ModDeps {
    by_name: HashMap<String, (String, Vec<String>)>,
}

/// `kernel/fs/9p/9p.ko.xz` -> `9p`; dashes become underscores as the kernel does.
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    stem.replace('-', "_")
}

impl ModDeps {
    /// Parses `modules.dep` (`path: dep dep ...` per line).
    pub fn parse(text: &str) -> Self {
        let by_name = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(path, deps)| {
                let path = path.trim().to_owned();
                let deps = deps.split_whitespace().map(str::to_owned).collect();
                (module_name(&path), (path, deps))
            })
            .collect();
        Self { by_name }
    }

    /// The paths to load for `roots`, dependencies first, each once. Modules in `builtin`
    /// are skipped; an unknown module is an error.
    pub fn closure(&self, roots: &[&str], builtin: &HashSet<String>) -> Result<Vec<String>> {
        let mut order = Vec::new();
        let mut seen = HashSet::new();
        for root in roots {
            let name = root.replace('-', "_");
            if builtin.contains(&name) {
                continue;
            }
            let (path, _) = self
                .by_name
                .get(&name)
                .ok_or_else(|| eyre!("module {root} is neither in modules.dep nor built in"))?;
            self.visit(path, &mut seen, &mut order, 0)?;
        }
        Ok(order)
    }

    fn visit(
        &self,
        path: &str,
        seen: &mut HashSet<String>,
        order: &mut Vec<String>,
        depth: usize,
    ) -> Result<()> {
        if depth > 64 {
            bail!("module dependency cycle near {path}");
        }
        if !seen.insert(path.to_owned()) {
            return Ok(());
        }
        let name = module_name(path);
        let deps = self
            .by_name
            .get(&name)
            .map(|(_, d)| d.clone())
            .unwrap_or_default();
        for d in &deps {
            self.visit(d, seen, order, depth + 1)?;
        }
        order.push(path.to_owned());
        Ok(())
    }
}

/// Names in `modules.builtin` (one path per line).
pub fn parse_builtin(text: &str) -> HashSet<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(module_name)
        .collect()
}

/// Returns the cached initramfs for `kernel`, building it when needed. `(path, built_now)`.
pub fn ensure_initramfs(kernel: &Kernel, cache: &Path) -> Result<(PathBuf, bool)> {
    let busybox = std::fs::read(BUSYBOX).wrap_err_with(|| {
        format!("reading {BUSYBOX}; install busybox-static (cargo xtask deps)")
    })?;
    let mut key = crc32c::crc32c(kernel.release.as_bytes());
    key = crc32c::crc32c_append(key, INIT_SCRIPT.as_bytes());
    key = crc32c::crc32c_append(key, MODULES.join(",").as_bytes());
    key = crc32c::crc32c_append(key, &busybox);
    let out = cache.join(format!("initramfs-{}-{key:08x}.cpio", kernel.release));
    if out.is_file() {
        return Ok((out, false));
    }
    let mdir = kernel.modules_dir();
    let deps = ModDeps::parse(
        &std::fs::read_to_string(mdir.join("modules.dep")).wrap_err_with(|| {
            format!("reading {}/modules.dep (did depmod run?)", mdir.display())
        })?,
    );
    let builtin =
        parse_builtin(&std::fs::read_to_string(mdir.join("modules.builtin")).unwrap_or_default());
    let order = deps.closure(MODULES, &builtin)?;

    let stage = tempfile::Builder::new()
        .prefix(".initramfs-")
        .tempdir_in(cache)?;
    let root = stage.path();
    for d in [
        "bin",
        "lib/modules",
        "proc",
        "sys",
        "dev",
        "mnt",
        "newroot",
        "tmp",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    write_mode(&root.join("bin/busybox"), &busybox, 0o755)?;
    write_mode(&root.join("init"), INIT_SCRIPT.as_bytes(), 0o755)?;
    let sh = Shell::new()?;
    let mut names = Vec::new();
    for rel in &order {
        let src = mdir.join(rel);
        let name = module_name(rel);
        let bytes = if rel.ends_with(".ko.xz") {
            exec::run_bytes(cmd!(sh, "xz -dc {src}"), None)?
        } else if rel.ends_with(".ko.zst") {
            exec::run_bytes(cmd!(sh, "zstd -dcq {src}"), None)?
        } else if rel.ends_with(".ko.gz") {
            exec::run_bytes(cmd!(sh, "gzip -dc {src}"), None)?
        } else {
            std::fs::read(&src).wrap_err_with(|| format!("reading module {}", src.display()))?
        };
        write_mode(&root.join(format!("lib/modules/{name}.ko")), &bytes, 0o644)?;
        names.push(name);
    }
    std::fs::write(root.join("lib/modules/order"), names.join("\n") + "\n")?;

    // cpio wants the file list on stdin, paths relative to the archive root.
    let mut list = String::new();
    collect_paths(root, root, &mut list)?;
    let sh_in = Shell::new()?;
    let _dir = sh_in.push_dir(root);
    let archive = exec::run_bytes(
        cmd!(sh_in, "cpio --quiet -o -H newc -R 0:0"),
        Some(list.into_bytes()),
    )?;
    let tmp = out.with_extension("cpio.tmp");
    std::fs::write(&tmp, archive).wrap_err_with(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out)?;
    // Old initramfs for other keys: remove, they are cheap to rebuild.
    if let Ok(it) = std::fs::read_dir(cache) {
        for e in it.flatten() {
            let p = e.path();
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("initramfs-") && p != out {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    Ok((out, true))
}

fn write_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    std::fs::write(path, bytes).wrap_err_with(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn collect_paths(base: &Path, dir: &Path, out: &mut String) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(base).map_err(|e| eyre!("{e}"))?;
        out.push_str(&rel.to_string_lossy());
        out.push('\n');
        if p.is_dir() {
            collect_paths(base, &p, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz: kernel/drivers/infiniband/core/ib_uverbs.ko.xz kernel/net/ipv6/ip6_udp_tunnel.ko.xz kernel/net/ipv4/udp_tunnel.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/ib_uverbs.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/ib_core.ko.xz:
kernel/net/ipv4/udp_tunnel.ko.xz:
kernel/net/ipv6/ip6_udp_tunnel.ko.xz:
kernel/crypto/crc32_generic.ko.xz:
kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/fs/fscache/fscache.ko kernel/net/9p/9pnet.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/drivers/net/virtio-net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
";

    fn pos(order: &[String], name: &str) -> usize {
        order
            .iter()
            .position(|p| module_name(p) == name)
            .unwrap_or_else(|| panic!("{name} missing from {order:?}"))
    }

    #[test]
    fn names() {
        assert_eq!(module_name("kernel/fs/9p/9p.ko.xz"), "9p");
        assert_eq!(
            module_name("kernel/drivers/net/virtio-net.ko"),
            "virtio_net"
        );
        assert_eq!(module_name("crc32_generic.ko.zst"), "crc32_generic");
    }

    #[test]
    fn closure_orders_dependencies_first() {
        let deps = ModDeps::parse(DEP);
        let order = deps
            .closure(&["crc32_generic", "rdma_rxe", "9p"], &HashSet::new())
            .unwrap();
        assert_eq!(order.len(), 10);
        assert!(pos(&order, "ib_core") < pos(&order, "ib_uverbs"));
        assert!(pos(&order, "ib_uverbs") < pos(&order, "rdma_rxe"));
        assert!(pos(&order, "udp_tunnel") < pos(&order, "rdma_rxe"));
        assert!(pos(&order, "netfs") < pos(&order, "fscache"));
        assert!(pos(&order, "fscache") < pos(&order, "9p"));
        let unique: HashSet<_> = order.iter().collect();
        assert_eq!(unique.len(), order.len());
    }

    #[test]
    fn closure_skips_builtin_and_rejects_unknown() {
        let deps = ModDeps::parse(DEP);
        let builtin = parse_builtin("kernel/crypto/crc32_generic.ko\n");
        let order = deps.closure(&["crc32_generic"], &builtin).unwrap();
        assert!(order.is_empty());
        let err = deps
            .closure(&["nonexistent"], &builtin)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nonexistent"), "{err}");
        // A dependency listed but without its own line is still loaded (as a leaf).
        let order = deps.closure(&["virtio-net"], &builtin).unwrap();
        assert_eq!(order.len(), 3);
        assert_eq!(module_name(&order[2]), "virtio_net");
    }

    #[test]
    fn init_script_reads_the_cmdline_contract() {
        for needle in [
            "xtask.argv=",
            "xtask.name=",
            "xtask.init=",
            "switch_root /newroot /lib/systemd/systemd",
            "exit_code",
            "sysrq-trigger",
            "hostroot",
            "xshare",
            "xsync",
            "tmpfiles.d/tmp.conf",
        ] {
            assert!(INIT_SCRIPT.contains(needle), "{needle}");
        }
    }
}
