//! The link-local wall of every engine with the network on, as data: which destinations get an
//! unreachable route (cloud metadata services answer at 169.254.169.254) and the netlink
//! messages that add them. Sending them is each engine's IO (bwrap: a child in the sandbox's
//! namespaces; docker and podman: a thread in the container's network namespace).

/// `AF_INET` and `AF_INET6` (Linux values; this crate has no libc).
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// Link-local destinations that get an unreachable route in every sandbox with a network:
/// (family, address, prefix length). IPv6 link-local addresses need no entry: they only reach
/// the sandbox's own link.
pub const LINK_LOCAL: &[(u8, &[u8], u8)] = &[
    (AF_INET, &[169, 254, 0, 0], 16),
    // AWS's IPv6 metadata endpoint, fd00:ec2::254.
    (AF_INET6, &[0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54], 128),
];

/// The `RTM_NEWROUTE` messages for [`LINK_LOCAL`], sequence numbers from 1.
pub fn link_local_messages() -> Vec<Vec<u8>> {
    LINK_LOCAL
        .iter()
        .zip(1u32..)
        .map(|((family, dest, prefix), seq)| unreachable_route(seq, *family, dest, *prefix))
        .collect()
}

/// The error of a netlink ack (`NLMSG_ERROR`): `Some(0)` on success, `Some(-errno)` on failure,
/// `None` when `ack` is too short to be one.
pub fn ack_error(ack: &[u8]) -> Option<i32> {
    let bytes: [u8; 4] = ack.get(16..20)?.try_into().ok()?;
    Some(i32::from_ne_bytes(bytes))
}

/// Pure: one `RTM_NEWROUTE` netlink message adding an unreachable route to `dest/prefix`.
pub fn unreachable_route(seq: u32, family: u8, dest: &[u8], prefix: u8) -> Vec<u8> {
    const RTM_NEWROUTE: u16 = 24;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_ACK: u16 = 0x4;
    const NLM_F_CREATE: u16 = 0x400;
    const NLM_F_EXCL: u16 = 0x200;
    const RT_TABLE_MAIN: u8 = 254;
    const RTPROT_STATIC: u8 = 4;
    const RT_SCOPE_UNIVERSE: u8 = 0;
    const RTN_UNREACHABLE: u8 = 7;
    const RTA_DST: u16 = 1;
    let attr_len = 4 + dest.len();
    let padded = (attr_len + 3) & !3;
    let total = 16 + 12 + padded;
    let mut msg = Vec::with_capacity(total);
    msg.extend_from_slice(&(total as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // struct rtmsg
    msg.extend_from_slice(&[family, prefix, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE]);
    msg.push(RTN_UNREACHABLE);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // RTA_DST
    msg.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    msg.extend_from_slice(&RTA_DST.to_ne_bytes());
    msg.extend_from_slice(dest);
    msg.resize(total, 0);
    msg
}

#[cfg(test)]
mod tests {
    /// The bytes are the addresses the comments name (the IPv6 entry once blocked
    /// `fd00:0:ec2::254`, leaving AWS's endpoint reachable).
    #[test]
    fn the_blocked_ranges_are_the_metadata_addresses() {
        let v4: std::net::Ipv4Addr =
            "169.254.0.0".parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
        let v6: std::net::Ipv6Addr =
            "fd00:ec2::254".parse().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED);
        assert_eq!(super::LINK_LOCAL[0].1, v4.octets());
        assert_eq!(super::LINK_LOCAL[1].1, v6.octets());
    }
}
