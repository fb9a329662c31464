//! What a file is, for an MCP answer: an image a model can see (PNG, JPEG, GIF, WebP: the
//! kinds MCP clients pass on as images), SVG (text a model reads), other text, or other
//! bytes with their MIME type. Pure: the file's name and bytes in, a kind out. The bytes
//! decide where they can (a PNG named `.txt` is a PNG); the name only names the type of bytes
//! that say nothing about themselves.

/// What [`kind`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An image MCP clients show a model, with its MIME type.
    Image(&'static str),
    /// An SVG drawing: text.
    Svg,
    /// UTF-8 text.
    Text,
    /// Anything else, with its MIME type (`application/octet-stream` when unknown).
    Binary(&'static str),
}

/// The MIME type of SVG.
pub(crate) const SVG: &str = "image/svg+xml";

/// Pure: the kind of the file `name` holding `bytes`.
pub(crate) fn kind(name: &str, bytes: &[u8]) -> Kind {
    const IMAGES: [(&[u8], &str); 4] = [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
    ];
    if let Some((_, mime)) = IMAGES.iter().find(|(magic, _)| bytes.starts_with(magic)) {
        return Kind::Image(mime);
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Kind::Image("image/webp");
    }
    let ext = extension(name);
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => {
            if ext == "svg" || looks_like_svg(text) {
                Kind::Svg
            } else {
                Kind::Text
            }
        }
        _ => Kind::Binary(binary_mime(&ext, bytes)),
    }
}

/// The lower-case extension of `name`, `""` without one.
fn extension(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    match base.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
        _ => String::new(),
    }
}

/// Whether a file name names an image kind [`kind`] may find (a cheap first look at the
/// files a run wrote, before any is read).
pub(crate) fn image_name(name: &str) -> bool {
    matches!(extension(name).as_str(), "png" | "jpg" | "jpeg" | "gif" | "webp" | "svg")
}

/// An SVG without the `.svg` name: its root element, after an XML declaration, comments or
/// a doctype, is `<svg`.
fn looks_like_svg(text: &str) -> bool {
    let head: String = text.trim_start_matches('\u{feff}').chars().take(1024).collect();
    let head = head.trim_start();
    head.starts_with("<svg") || (head.starts_with('<') && head.contains("<svg"))
}

/// The MIME type of bytes that are neither an image nor text.
fn binary_mime(ext: &str, bytes: &[u8]) -> &'static str {
    const MAGIC: [(&[u8], &str); 6] = [
        (b"%PDF-", "application/pdf"),
        (b"PK\x03\x04", "application/zip"),
        (b"\x1f\x8b", "application/gzip"),
        (b"SQLite format 3\0", "application/vnd.sqlite3"),
        (b"PAR1", "application/vnd.apache.parquet"),
        (b"BM", "image/bmp"),
    ];
    if let Some((_, mime)) = MAGIC.iter().find(|(magic, _)| bytes.starts_with(magic)) {
        return mime;
    }
    match ext {
        "tif" | "tiff" => "image/tiff",
        "ico" => "image/vnd.microsoft.icon",
        "wasm" => "application/wasm",
        "svgz" => SVG,
        _ => "application/octet-stream",
    }
}

/// Pure: `bytes` as standard base64.
pub(crate) fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_decide_and_the_name_only_names_the_rest() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(kind("plot.txt", png), Kind::Image("image/png"));
        assert_eq!(kind("a.jpg", b"\xff\xd8\xff\xe0\0\x10JFIF"), Kind::Image("image/jpeg"));
        assert_eq!(kind("a", b"GIF89a\x01\0"), Kind::Image("image/gif"));
        assert_eq!(kind("a", b"RIFF\x24\0\0\0WEBPVP8 "), Kind::Image("image/webp"));
        assert_eq!(
            kind("a.webp", b"RIFF\x24\0\0\0WAVEfmt "),
            Kind::Binary("application/octet-stream")
        );
        assert_eq!(kind("fig.svg", b"<?xml version=\"1.0\"?>\n<svg/>"), Kind::Svg);
        assert_eq!(kind("fig", b"<!-- made by matplotlib -->\n<svg xmlns=\"x\"></svg>"), Kind::Svg);
        assert_eq!(kind("page.html", b"<html><body>hi</body></html>"), Kind::Text);
        assert_eq!(kind("notes.txt", "h\u{e9}llo\n".as_bytes()), Kind::Text);
        assert_eq!(kind("empty", b""), Kind::Text);
        assert_eq!(kind("a.txt", b"nul\0inside"), Kind::Binary("application/octet-stream"));
        assert_eq!(kind("r.pdf", b"%PDF-1.7\n\xe2\xe3"), Kind::Binary("application/pdf"));
        assert_eq!(kind("x.bin", b"\xff\xfe\x00"), Kind::Binary("application/octet-stream"));
        assert_eq!(kind("T.TIFF", b"II*\0\x08"), Kind::Binary("image/tiff"));
    }

    #[test]
    fn image_names_are_the_kinds_a_run_can_return() {
        assert!(image_name("out/plot.PNG") && image_name("a.jpeg") && image_name("f.svg"));
        assert!(!image_name("data.csv") && !image_name(".png") && !image_name("png"));
    }

    #[test]
    fn base64_is_standard_and_padded() {
        assert_eq!(base64(b"\x89PNG"), "iVBORw==");
        assert_eq!(base64(b""), "");
    }
}
