//! The one nftables rule a container with published ports gets: its gateway is the host, and
//! an unreachable route to it would also drop the replies to the published ports' connections,
//! which come from the gateway (docker's proxy, podman's NAT). So the gateway keeps its route,
//! and this rule refuses what the container starts towards it:
//!
//! ```text
//! table ip python-sandbox { chain out { type filter hook output priority 0; policy accept;
//!     ip daddr GATEWAY ct state new reject with icmp host-unreachable } }
//! ```
//!
//! built here as one nfnetlink batch (the kernel's uapi, no `nft` binary in the image): a new
//! connection to the gateway fails with `EHOSTUNREACH`, as a walled address's does; replies
//! (tracked, not new) go out.

use std::net::Ipv4Addr;

use sandbox_core::netlink_attr as attr;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;
/// `NFPROTO_IPV4`, the table's family.
const FAMILY_IP: u8 = 2;
const AF_UNSPEC: u8 = 0;
/// The table's and the chain's names.
const TABLE: &str = "python-sandbox";
const CHAIN: &str = "out";

fn nested(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
    attr(kind | NLA_F_NESTED, &parts.concat())
}

fn name(kind: u16, text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    attr(kind, &bytes)
}

fn be32(kind: u16, value: u32) -> Vec<u8> {
    attr(kind, &value.to_be_bytes())
}

/// One message of the batch: header, `nfgenmsg` (family, version 0, resource id), attributes.
fn message(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = vec![family, 0];
    payload.extend_from_slice(&res_id.to_be_bytes());
    payload.extend(attrs.concat());
    sandbox_core::netlink_message(kind, flags, seq, &payload)
}

/// An expression of a rule: its name and its attributes.
fn expr(kind: &str, data: &[Vec<u8>]) -> Vec<u8> {
    // NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { ... } }
    nested(1, &[name(1, kind), nested(2, data)])
}

/// `NFTA_DATA_VALUE` around `bytes`.
fn value(kind: u16, bytes: &[u8]) -> Vec<u8> {
    nested(kind, &[attr(1, bytes)])
}

/// The rule's expressions for `gateway`: the destination into register 1, compared; the
/// connection's state into register 1, masked to "new", compared; then the reject.
fn expressions(gateway: Ipv4Addr) -> Vec<u8> {
    const REG_1: u32 = 1;
    const NFT_CMP_EQ: u32 = 0;
    const NFT_CMP_NEQ: u32 = 1;
    const NETWORK_HEADER: u32 = 1;
    const CT_STATE: u32 = 0;
    /// `NF_CT_STATE_BIT(IP_CT_NEW)`, in the register's (host) byte order.
    const STATE_NEW: u32 = 1 << 3;
    const REJECT_ICMP_UNREACH: u32 = 0;
    const ICMP_HOST_UNREACH: u8 = 1;
    let list = [
        // payload load 4b @ network header + 16 => reg 1
        expr("payload", &[be32(1, REG_1), be32(2, NETWORK_HEADER), be32(3, 16), be32(4, 4)]),
        // cmp eq reg 1 GATEWAY
        expr("cmp", &[be32(1, REG_1), be32(2, NFT_CMP_EQ), value(3, &gateway.octets())]),
        // ct load state => reg 1
        expr("ct", &[be32(1, REG_1), be32(2, CT_STATE)]),
        // bitwise reg 1 = (reg 1 & NEW) ^ 0
        expr(
            "bitwise",
            &[
                be32(1, REG_1),
                be32(2, REG_1),
                be32(3, 4),
                value(4, &STATE_NEW.to_ne_bytes()),
                value(5, &0u32.to_ne_bytes()),
            ],
        ),
        // cmp neq reg 1 0
        expr("cmp", &[be32(1, REG_1), be32(2, NFT_CMP_NEQ), value(3, &0u32.to_ne_bytes())]),
        // reject with icmp host-unreachable
        expr("reject", &[be32(1, REJECT_ICMP_UNREACH), attr(2, &[ICMP_HOST_UNREACH])]),
    ];
    nested(4, &list)
}

/// Pure: the batch that makes the table, its output chain and one rule per gateway; every
/// message but the batch's bounds asks for an ack. `None` without a gateway.
pub(crate) fn reject_new_to(gateways: &[Ipv4Addr]) -> Option<Vec<u8>> {
    if gateways.is_empty() {
        return None;
    }
    let ack = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    let kind = |msg: u16| (NFNL_SUBSYS_NFTABLES << 8) | msg;
    let mut batch =
        message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES, &[]);
    batch.extend(message(kind(NFT_MSG_NEWTABLE), ack, 1, FAMILY_IP, 0, &[name(1, TABLE)]));
    const NF_INET_LOCAL_OUT: u32 = 3;
    const NF_ACCEPT: u32 = 1;
    let chain = [
        name(1, TABLE),
        name(3, CHAIN),
        nested(4, &[be32(1, NF_INET_LOCAL_OUT), be32(2, 0)]),
        be32(5, NF_ACCEPT),
        name(7, "filter"),
    ];
    batch.extend(message(kind(NFT_MSG_NEWCHAIN), ack, 2, FAMILY_IP, 0, &chain));
    for (gateway, seq) in gateways.iter().zip(3u32..) {
        let rule = [name(1, TABLE), name(2, CHAIN), expressions(*gateway)];
        let flags = ack | NLM_F_APPEND;
        batch.extend(message(kind(NFT_MSG_NEWRULE), flags, seq, FAMILY_IP, 0, &rule));
    }
    let end_seq = 3 + gateways.len() as u32;
    batch.extend(message(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        end_seq,
        AF_UNSPEC,
        NFNL_SUBSYS_NFTABLES,
        &[],
    ));
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages of a batch: (type, flags) each, and their lengths add up.
    fn walk(batch: &[u8]) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < batch.len() {
            let len = u32::from_ne_bytes(batch[at..at + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes([batch[at + 4], batch[at + 5]]);
            let flags = u16::from_ne_bytes([batch[at + 6], batch[at + 7]]);
            assert!(len >= 20 && len.is_multiple_of(4), "message at {at}: {len}");
            out.push((kind, flags));
            at += len;
        }
        assert_eq!(at, batch.len());
        out
    }

    #[test]
    fn the_batch_is_a_table_a_chain_and_a_rule_per_gateway() {
        assert_eq!(reject_new_to(&[]), None);
        let gateways = [Ipv4Addr::new(172, 17, 0, 1), Ipv4Addr::new(10, 88, 0, 1)];
        let batch = reject_new_to(&gateways).unwrap();
        let messages = walk(&batch);
        let kinds: Vec<u16> = messages.iter().map(|m| m.0).collect();
        assert_eq!(kinds, [0x10, 0x0a00, 0x0a03, 0x0a06, 0x0a06, 0x11]);
        let acks = messages.iter().filter(|m| m.1 & NLM_F_ACK != 0).count();
        assert_eq!(acks, 4);
        // The gateway, in network order, right after its compare's value header.
        let gateway = [8u8, 0, 1, 0, 172, 17, 0, 1];
        assert!(batch.windows(8).any(|w| w == gateway));
    }
}
