//! Atomic file output: write to a uniquely named temporary file beside the target
//! ([`tempfile::NamedTempFile`]), fsync, then rename over the target (`persist`). Two writers of
//! the same path never share a temporary file, and a failure at any step removes it.

use std::io::Write;
use std::path::Path;

/// The prefix of the temporary files [`write_atomic_with`] creates beside `path`
/// (`.name.` followed by random characters and `.tmp`).
pub fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.")
}

/// Checks, before any work, that [`write_atomic`] could write `path`: its directory exists (it
/// is not created) and takes a new file, and `path` is not a directory. The probe is a
/// temporary file of the kind the write uses, removed at once.
///
/// # Errors
/// An I/O error naming `path` and, for the directory, the directory.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    let err = |kind, m: String| std::io::Error::new(kind, format!("{}: {m}", path.display()));
    if path.is_dir() {
        return Err(err(
            std::io::ErrorKind::IsADirectory,
            "is a directory".into(),
        ));
    }
    let parent = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p,
        None => Path::new("."),
    };
    if !parent.is_dir() {
        let why = if parent.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(err(
            std::io::ErrorKind::NotFound,
            format!("{} {why}", parent.display()),
        ));
    }
    tempfile::Builder::new()
        .prefix(&temp_prefix(path))
        .suffix(".tmp")
        .tempfile_in(parent)
        .map(drop)
        .map_err(|e| {
            err(
                e.kind(),
                format!("cannot create a file in {}: {e}", parent.display()),
            )
        })
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
    let parent = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(|e| {
                std::io::Error::new(e.kind(), format!("creating {}: {e}", parent.display()))
            })?;
            parent
        }
        None => Path::new("."),
    };
    // Dropping the temporary file on any early return deletes it: no debris beside the output.
    let prefix = temp_prefix(path);
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // tempfile creates owner-only files; an output gets what `File::create` gives (0666 less the
    // umask), as before.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(parent).map_err(ctx)?;
    let mut w = std::io::BufWriter::new(tmp.reopen().map_err(ctx)?);
    fill(&mut w)
        .and_then(|_| w.flush())
        .and_then(|_| w.get_ref().sync_all())
        .map_err(ctx)?;
    drop(w);
    tmp.persist(path).map_err(|e| ctx(e.error))?;
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

    /// Names of the temporary files left in `dir`.
    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("bindscope-fsutil-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(leftovers(&dir), Vec::<String>::new());
        let failed = write_atomic_with(&p, |_| Err(std::io::Error::other("boom")));
        assert!(failed.is_err());
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"two",
            "a failed write must keep the old file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Outputs are as readable as `File::create` makes them, not owner-only like a temp file.
    #[cfg(unix)]
    #[test]
    fn outputs_get_the_usual_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.txt");
        std::fs::write(&plain, b"x").unwrap();
        let atomic = dir.path().join("atomic.txt");
        write_atomic(&atomic, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain));
    }

    #[test]
    fn check_writable_names_what_is_wrong_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("emb.jsonl");
        check_writable(&out).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "probe left behind"
        );
        let e = check_writable(&dir.path().join("no-such-dir/emb.jsonl")).unwrap_err();
        assert!(e.to_string().contains("no-such-dir does not exist"), "{e}");
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let e = check_writable(&dir.path().join("file/emb.jsonl")).unwrap_err();
        assert!(e.to_string().contains("file is not a directory"), "{e}");
        std::fs::create_dir(&out).unwrap();
        let e = check_writable(&out).unwrap_err();
        assert!(e.to_string().contains("emb.jsonl: is a directory"), "{e}");
    }

    #[test]
    fn a_failed_rename_leaves_no_temp_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // The output names an existing non-empty directory: the final rename fails.
        let out = dir.path().join("emb.jsonl");
        std::fs::create_dir_all(out.join("inside")).unwrap();
        let e = write_atomic(&out, b"x").unwrap_err();
        assert!(e.to_string().contains("emb.jsonl"), "{e}");
        assert_eq!(
            leftovers(dir.path()),
            Vec::<String>::new(),
            "temp file left behind"
        );
        // A parent that is a file: the error names it.
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let e = write_atomic(&blocker.join("out.txt"), b"x").unwrap_err();
        assert!(e.to_string().contains("file"), "{e}");
    }
}
