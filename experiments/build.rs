//! Build-time provenance for `config.json`: the versions of every crate in the build's
//! `Cargo.lock` (`built`, written to `$OUT_DIR/built.rs`) and the commit and dirty state of the
//! source tree the binary is built from (`vergen-gitcl`: `VERGEN_GIT_SHA`, `VERGEN_GIT_DIRTY`).
//! Outside a git checkout the git facts are left unset and the binary records "unknown".

fn main() {
    println!("cargo:rerun-if-changed=../Cargo.lock");
    built::write_built_file().expect("writing the build facts (built.rs)");
    let git = vergen_gitcl::Gitcl::builder()
        .sha(false)
        .dirty(false)
        .build();
    let emitted = vergen_gitcl::Emitter::default()
        .add_instructions(&git)
        .and_then(|e| e.emit());
    if let Err(e) = emitted {
        println!("cargo:warning=no git facts for config.json: {e}");
    }
}
