//! Atomic file output: write to a temporary sibling, fsync, rename.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary sibling used while `path` is being written (`.name.tmp`).
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Writes `bytes` to `path` atomically: either the old file (or nothing) or the complete new
/// file is visible, never a partial one.
///
/// # Errors
/// Any I/O error, with the path in the message.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// Like [`write_atomic`] but lets the caller stream into the temporary file.
///
/// # Errors
/// Any I/O error from `fill` or from the rename, with the path in the message.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let ctx = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            std::io::Error::new(e.kind(), format!("creating {}: {e}", parent.display()))
        })?;
    }
    let tmp = temp_sibling(path);
    let file = std::fs::File::create(&tmp).map_err(ctx)?;
    let mut w = std::io::BufWriter::new(file);
    let res = fill(&mut w)
        .and_then(|_| w.flush())
        .and_then(|_| w.get_ref().sync_all());
    drop(w);
    // Whatever fails, the temporary file goes: no debris next to the output.
    let res = res.and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    Ok(())
}

/// Appends one line (a `\n` is added) to `path` with a single `write` call and fsync, so a
/// crash leaves either the whole line or none of it. Used for resumable per-item logs.
///
/// # Errors
/// Any I/O error, with the path in the message.
pub fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let ctx = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(ctx)?;
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    f.write_all(buf.as_bytes()).map_err(ctx)?;
    f.sync_data().map_err(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("bindscope-fsutil-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!temp_sibling(&p).exists());
        let failed = write_atomic_with(&p, |_| Err(std::io::Error::other("boom")));
        assert!(failed.is_err());
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"two",
            "a failed write must keep the old file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_rename_leaves_no_temp_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // The output names an existing non-empty directory: the final rename fails.
        let out = dir.path().join("emb.jsonl");
        std::fs::create_dir_all(out.join("inside")).unwrap();
        let e = write_atomic(&out, b"x").unwrap_err();
        assert!(e.to_string().contains("emb.jsonl"), "{e}");
        assert!(!temp_sibling(&out).exists(), "temp file left behind");
        // A parent that is a file: the error names it.
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let e = write_atomic(&blocker.join("out.txt"), b"x").unwrap_err();
        assert!(e.to_string().contains("file"), "{e}");
    }
}
