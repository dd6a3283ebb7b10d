//! Build-time provenance for `config.json`: the versions of every crate in the build's
//! `Cargo.lock` (`built`, written to `$OUT_DIR/built.rs`) and the commit and dirty state of the
//! source tree the binary is built from (`vergen-gitcl`: `VERGEN_GIT_SHA`, `VERGEN_GIT_DIRTY`).
//! Outside a git checkout the git facts are left unset and the binary records "unknown".

fn main() {
    println!("cargo:rerun-if-changed=../Cargo.lock");
    // `git_dirty` must follow edits of the sources, not only commits (vergen watches HEAD and
    // the branch ref): re-run when any source directory or the index changes.
    for dir in ["../src", "../crates", "../models", "src", "../benches"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    for git_file in ["../.git/index", "../.git/packed-refs"] {
        if std::path::Path::new(git_file).exists() {
            println!("cargo:rerun-if-changed={git_file}");
        }
    }
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
