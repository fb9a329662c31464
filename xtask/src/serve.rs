//! A static file server on loopback that lays a directory out as GitHub Releases does
//! (`<base>/v<version>/<file>`), so the plugin's launcher downloads a release with no network:
//! `cargo xtask plugin --provision` serves `target/dist` (and a tampered copy), `cargo xtask
//! bench` times a first use from it. It serves until the process ends.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;

use anyhow::{Context, Result};

/// A server's base URL, the value of the launcher's `PYTHON_SANDBOX_RELEASE_BASE`.
pub(crate) fn releases(dir: PathBuf, version: &str) -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    let base = format!("http://{}/releases", listener.local_addr()?);
    let prefix = format!("/releases/v{version}/");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, &dir, &prefix);
        }
    });
    Ok(base)
}

/// One GET: the file named after the prefix (a plain name, nothing above `dir`), or 404.
fn answer(mut stream: std::net::TcpStream, dir: &std::path::Path, prefix: &str) -> Result<()> {
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let name = request.split_whitespace().nth(1).and_then(|p| p.strip_prefix(prefix));
    let body = name
        .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
        .and_then(|n| std::fs::read(dir.join(n)).ok());
    let (status, body) = match body {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", b"not found\n".to_vec()),
    };
    let head =
        format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn get(base: &str, path: &str) -> String {
        let addr = base.trim_start_matches("http://").split('/').next().expect("host:port");
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        let mut out = String::new();
        stream.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn serves_the_files_of_one_version_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("xtask-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch");
        std::fs::write(dir.join("a.tar.gz"), "tarball").expect("write");
        let base = releases(dir.clone(), "1.2.3").expect("serve");
        assert!(base.ends_with("/releases"), "{base}");
        let ok = get(&base, "/releases/v1.2.3/a.tar.gz");
        assert!(ok.starts_with("HTTP/1.1 200 OK") && ok.ends_with("\r\n\r\ntarball"), "{ok}");
        for path in ["/releases/v1.2.4/a.tar.gz", "/releases/v1.2.3/../a.tar.gz", "/a.tar.gz"] {
            assert!(get(&base, path).starts_with("HTTP/1.1 404"), "{path}");
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
