//! Host port probes for published ports, shared by every engine (the contract and its errors
//! are `sandbox_core::publish`, which stays free of IO and calls these through closures).

use std::net::{IpAddr, SocketAddr, TcpListener};

/// Whether `addr:port` is taken on the host now: a bind, released at once. Only "in use"
/// counts; another bind error (a privileged port, an address the host does not have) is left
/// to the engine, which may be allowed what this process is not.
pub fn in_use(addr: IpAddr, port: u16) -> bool {
    TcpListener::bind(SocketAddr::new(addr, port))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
}

/// Picks free host ports (bind port 0, read it), holding each until the picker is dropped so
/// two picks never return the same port. Racy after the drop: another process may take the
/// port before the engine binds it, and the engine then fails as for a busy port.
#[derive(Debug, Default)]
pub struct Picker {
    held: Vec<TcpListener>,
}

impl Picker {
    /// A free port on `addr`.
    pub fn pick(&mut self, addr: IpAddr) -> std::io::Result<u16> {
        let listener = TcpListener::bind(SocketAddr::new(addr, 0))?;
        let port = listener.local_addr()?.port();
        self.held.push(listener);
        Ok(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listening port is in use, a released one is not; picks held together differ.
    #[test]
    fn in_use_and_picks() {
        let localhost = IpAddr::from([127, 0, 0, 1]);
        let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        assert!(in_use(localhost, port));
        drop(taken);
        assert!(released(localhost, port));
        let mut picker = Picker::default();
        let (a, b) = (picker.pick(localhost).expect("pick"), picker.pick(localhost).expect("pick"));
        assert_ne!(a, b);
        assert!(in_use(localhost, a), "held until the picker goes");
        drop(picker);
        assert!(released(localhost, a));
    }

    /// Whether `port` is free again within a second: a parallel test that forks (its child
    /// holds a copy of every descriptor until its exec closes them) may keep it a moment.
    fn released(ip: IpAddr, port: u16) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while in_use(ip, port) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }
}
