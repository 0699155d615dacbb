//! Bindings to librdmacm (`rdma/rdma_cma.h`, RDMA CM) that reuse ibverbs-sys's verbs types: every
//! `ibv_*` type an RDMA CM call takes or returns (`ibv_context`, `ibv_qp_attr`, ...) is
//! ibverbs-sys's own, so one queue pair attribute type and one device handle serve the verbs
//! and RDMA CM alike. Only what RDMA CM adds is generated here: the `rdma_*` functions and
//! types, and `ibv_sa_*` (the path record, which ibverbs-sys does not bind). Socket addresses
//! are libc's.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let lib = match pkg_config::Config::new()
        .atleast_version("1.2.28")
        .probe("librdmacm")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "rdma-core-rs needs librdmacm's headers (RDMA CM): install librdmacm-dev \
                 (`cargo xtask deps` does): {e}"
            );
            std::process::exit(1);
        }
    };
    let builder = bindgen::Builder::default()
        .header_contents("rdma_cm.h", "#include <rdma/rdma_cma.h>\n")
        .clang_args(
            lib.include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .allowlist_function("rdma_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*")
        // The path record RDMA_OPTION_IB_PATH takes (infiniband/sa.h), and its flags.
        .allowlist_type("ibv_path_data")
        .allowlist_var("IBV_PATH_FLAG_.*")
        // ibverbs-sys's, glob-imported in `cm::sys`: everything `ibv_` but the `ibv_sa_` and
        // `ibv_path_` path record types (infiniband/sa.h), which it does not bind.
        .blocklist_type("ibv_[^sp].*|ibv_s[^a].*|ibv_p[^a].*|ibv_pa[^t].*|ibv_pat[^h].*")
        .blocklist_function("ibv_.*")
        // libc's.
        .blocklist_type("sockaddr|sockaddr_in|sockaddr_in6|sockaddr_storage|in_addr|in6_addr|sa_family_t|in_port_t|in_addr_t|socklen_t|__be16|__be32|__be64|__u8|__u16|__u32|__u64")
        .raw_line("use ibverbs_sys::*;")
        .raw_line("use libc::{in6_addr, in_addr, in_addr_t, in_port_t, sa_family_t, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};")
        .raw_line("#[allow(non_camel_case_types)] type __be16 = u16;")
        .raw_line("#[allow(non_camel_case_types)] type __be32 = u32;")
        .raw_line("#[allow(non_camel_case_types)] type __be64 = u64;")
        .raw_line("#[allow(non_camel_case_types)] type __u8 = u8;")
        .raw_line("#[allow(non_camel_case_types)] type __u16 = u16;")
        .raw_line("#[allow(non_camel_case_types)] type __u32 = u32;")
        .raw_line("#[allow(non_camel_case_types)] type __u64 = u64;")
        // Enums as ibverbs-sys writes them, so that a field of one of its enum types names it
        // as it does: these as a module of constants (`ibv_qp_state::IBV_QPS_RTR`), the rest
        // as plain constants. RDMA CM's own as modules too (`rdma_cm_event_type::...`).
        .constified_enum_module(
            "ibv_qp_type|ibv_qp_state|ibv_port_state|ibv_wc_opcode|ibv_wr_opcode|ibv_wc_status|rdma_.*",
        )
        // A union holding a verbs type (whose Copy bindgen cannot see) is still a Rust union.
        .default_non_copy_union_style(bindgen::NonCopyUnionStyle::ManuallyDrop)
        .wrap_unsafe_ops(true)
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate_comments(false);
    let bindings = match builder.generate() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdma-core-rs: generating the RDMA CM bindings failed: {e}");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("rdma_cm.rs");
    if let Err(e) = bindings.write_to_file(&out) {
        eprintln!("rdma-core-rs: writing {}: {e}", out.display());
        std::process::exit(1);
    }
}
