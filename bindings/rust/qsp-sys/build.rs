//! Finds libqsp with pkg-config and runs bindgen over its header.
//!
//! * `pkg-config qsp` gives the link flags and the include directory holding
//!   `qsp/qsp.h` (the build tree's qsp.pc, or the installed libqsp-dev's).
//! * `QSP_INCLUDE_DIR` overrides the include directory.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=QSP_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let lib = pkg_config::Config::new()
        .atleast_version("1.2") // qsp_prefill_batch (1.1), the tokenizer (1.2)
        .probe("qsp")
        .unwrap_or_else(|e| panic!("qsp-sys: libqsp not found through pkg-config (set PKG_CONFIG_PATH): {}", e));

    let include = match env::var_os("QSP_INCLUDE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => lib
            .include_paths
            .iter()
            .find(|p| p.join("qsp/qsp.h").is_file())
            .cloned()
            .unwrap_or_else(|| panic!("qsp-sys: qsp/qsp.h is in none of {:?}", lib.include_paths)),
    };
    // qsp_gguf.h includes qsp.h: both headers in one pass.
    let header = include.join("qsp/qsp_gguf.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed={}", include.join("qsp/qsp.h").display());
    println!("cargo:include={}", include.display());

    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy().into_owned())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_function("qsp_.*")
        .allowlist_type("qsp_.*")
        .allowlist_var("QSP_.*")
        // The status and enum macros are int32_t values in the API.
        .default_macro_constant_type(bindgen::MacroTypeVariation::Signed)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .rustfmt_bindings(false)
        .generate()
        .expect("qsp-sys: bindgen failed on qsp_gguf.h / qsp.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("qsp-sys: cannot write bindings.rs");
}
