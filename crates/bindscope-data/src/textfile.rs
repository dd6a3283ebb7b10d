//! Reading a user's text file (`embed --texts`, `saber eval --data`, `finetune data --import`):
//! the one reader, so every command treats encodings the same way.
//!
//! - The file must be UTF-8; the first invalid byte is reported by line and column (1-based,
//!   the column in bytes), so the user can find it.
//! - A leading UTF-8 byte-order mark (U+FEFF, which Windows editors write) is an encoding marker,
//!   not text: it is removed, and [`TextFile::bom_removed`] says so for the caller to report.
//!   A byte-order mark anywhere else is left alone (it is then part of a line).
//! - Line ends are the caller's business (`str::lines` takes `\n` and `\r\n`).

use std::path::{Path, PathBuf};

/// Why a text file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TextFileError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not UTF-8.
    #[error("{path}:{line}:{column}: not valid UTF-8 (byte 0x{byte:02x}); save the file as UTF-8")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based byte column of it within the line.
        column: usize,
        /// The byte.
        byte: u8,
    },
}

/// A text file's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFile {
    /// The file.
    pub path: PathBuf,
    /// The text, without a leading byte-order mark.
    pub text: String,
    /// Whether a leading UTF-8 byte-order mark was removed.
    pub bom_removed: bool,
}

impl TextFile {
    /// The note a command prints when [`TextFile::bom_removed`] (`None` otherwise).
    pub fn bom_note(&self) -> Option<String> {
        self.bom_removed
            .then(|| format!("{}: UTF-8 byte-order mark removed", self.path.display()))
    }
}

/// Reads `path` as UTF-8 text (see the module docs).
///
/// # Errors
/// [`TextFileError::Io`], [`TextFileError::NotUtf8`] naming the line and column.
pub fn read_text_file(path: &Path) -> Result<TextFile, TextFileError> {
    let bytes = std::fs::read(path).map_err(|source| TextFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let before = &bytes[..at];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        TextFileError::NotUtf8 {
            path: path.to_path_buf(),
            line: before.iter().filter(|&&b| b == b'\n').count() + 1,
            column: at - line_start + 1,
            byte: bytes[at],
        }
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => TextFile {
            path: path.to_path_buf(),
            text: rest.to_string(),
            bom_removed: true,
        },
        None => TextFile {
            path: path.to_path_buf(),
            text,
            bom_removed: false,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_bom_is_removed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.txt");
        std::fs::write(&p, "\u{feff}first\nsecond \u{feff}\n").unwrap();
        let f = read_text_file(&p).unwrap();
        assert_eq!(f.text, "first\nsecond \u{feff}\n");
        assert!(f.bom_removed);
        assert!(f.bom_note().unwrap().contains("t.txt"));
        std::fs::write(&p, "plain\n").unwrap();
        let f = read_text_file(&p).unwrap();
        assert_eq!(
            (f.text.as_str(), f.bom_removed, f.bom_note()),
            ("plain\n", false, None)
        );
    }

    #[test]
    fn invalid_utf8_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("latin1.txt");
        // "ok\ncaf\xe9\n": Latin-1 é on line 2, byte 4.
        std::fs::write(&p, b"ok\ncaf\xe9\n").unwrap();
        let e = read_text_file(&p).unwrap_err();
        assert!(
            matches!(
                e,
                TextFileError::NotUtf8 {
                    line: 2,
                    column: 4,
                    byte: 0xe9,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("latin1.txt:2:4"), "{e}");
        let missing = read_text_file(&dir.path().join("none.txt")).unwrap_err();
        assert!(missing.to_string().contains("none.txt"), "{missing}");
    }
}
