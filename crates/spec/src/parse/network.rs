//! Network fields: net0's fields on the container itself and each `extra_interfaces` item,
//! decoded into the partial [`NetInput`], then resolved into an [`Interface`] (addresses,
//! gateways and their consistency).

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use super::input::{Gw, Ip6Spec, IpSpec, NetInput};
use super::{join, quote, Cx};
use crate::model::*;
use crate::syntax;
use crate::yaml::Entry;

impl Cx<'_> {
    /// Decode one network field into `net`; false when `e` is not a network field.
    pub(super) fn net_field(&mut self, net: &mut NetInput, e: &Entry, p: &str) -> bool {
        let n = &e.value;
        match e.key.as_str() {
            "bridge" => {
                if let Some(s) = self.string(n, p) {
                    if syntax::is_bridge_name(&s) {
                        net.bridge = Some(s);
                    } else {
                        self.err(n.span, p, format!("bridge {} is not a bridge name", quote(&s)), Some("a Linux bridge such as vmbr0 (1 to 15 letters, digits, '-', '_', '.')"));
                    }
                }
            }
            "ip_address" => {
                if let Some(s) = self.string(n, p) {
                    net.ip = match s.as_str() {
                        "dhcp" => Some(IpSpec::Dhcp),
                        "none" => Some(IpSpec::None),
                        _ => self.cidr4(&s, n.span, p).map(IpSpec::Static),
                    };
                }
            }
            "gateway" => {
                if n.is_null() {
                    self.err(n.span, p, "gateway is empty", Some("an IPv4 address such as 192.168.7.1, or `none` for a network without a router"));
                } else if let Some(s) = self.string(n, p) {
                    if s == "none" {
                        net.gateway = Some(Gw::None);
                    } else {
                        match s.parse::<Ipv4Addr>() {
                            Ok(a) => net.gateway = Some(Gw::Addr(a)),
                            Err(_) => self.err(
                                n.span,
                                p,
                                format!("gateway {} is not an IPv4 address", quote(&s)),
                                Some("an address without prefix, e.g. 192.168.7.1, or `none`"),
                            ),
                        }
                    }
                }
            }
            "ipv6" => {
                if let Some(s) = self.string(n, p) {
                    net.ip6 = match s.as_str() {
                        "auto" => Some(Ip6Spec::Auto),
                        "dhcp" => Some(Ip6Spec::Dhcp),
                        "none" => Some(Ip6Spec::None),
                        _ => match s.parse::<Ipv6Net>() {
                            Ok(c) => Some(Ip6Spec::Static(c)),
                            Err(_) => {
                                let hint = if s.parse::<Ipv6Addr>().is_ok() {
                                    "add the prefix length, e.g. 2001:db8::10/64"
                                } else {
                                    "`auto` (SLAAC), `dhcp`, `none` or an IPv6 CIDR such as 2001:db8::10/64"
                                };
                                self.err(
                                    n.span,
                                    p,
                                    format!("ipv6 {} is not valid", quote(&s)),
                                    Some(hint),
                                );
                                None
                            }
                        },
                    };
                }
            }
            "gateway6" => {
                if n.is_null() {
                    self.err(
                        n.span,
                        p,
                        "gateway6 is empty",
                        Some("an IPv6 address such as 2001:db8::1"),
                    );
                } else if let Some(s) = self.string(n, p) {
                    match s.parse::<Ipv6Addr>() {
                        Ok(a) => net.gateway6 = Some(a),
                        Err(_) => self.err(
                            n.span,
                            p,
                            format!("gateway6 {} is not an IPv6 address", quote(&s)),
                            Some("an address without prefix, e.g. 2001:db8::1"),
                        ),
                    }
                }
            }
            "vlan_id" => net.vlan_id = self.int(n, p, 1, 4094, "").map(|v| v as u16),
            "mtu" => net.mtu = self.int(n, p, 576, 65520, "").map(|v| v as u16),
            "mac_address" => {
                if let Some(s) = self.string(n, p) {
                    match s.parse::<MacAddr>() {
                        Ok(m) if m.is_unicast() => net.mac = Some(m),
                        Ok(_) => self.err(n.span, p, format!("mac_address {} is a multicast address", quote(&s)), Some("the first byte must be even, e.g. BC:24:11:xx:xx:xx (PVE's prefix)")),
                        Err(e) => self.err(n.span, p, e.to_string(), None),
                    }
                }
            }
            "firewall" => net.firewall = self.boolean(n, p),
            "rate_limit" => net.rate_limit = self.number(n, p, 0.0, 1e9),
            "host_managed" => net.host_managed = self.boolean(n, p),
            "link_down" => net.link_down = self.boolean(n, p),
            "trunks" => net.trunks = self.trunks(n, p),
            _ => return false,
        }
        true
    }

    /// `trunks:` a list of VLAN ids (1..4094), each once: PVE's `trunks=vlanid[;vlanid...]`.
    fn trunks(&mut self, n: &crate::yaml::Node, p: &str) -> Option<Vec<u16>> {
        let crate::yaml::Value::Seq(items) = &n.value else {
            self.err(
                n.span,
                p,
                format!("trunks must be a list of VLAN ids, got {}", n.kind()),
                Some("for example `trunks: [10, 20, 30]`"),
            );
            return None;
        };
        let mut out: Vec<u16> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = super::join(p, &i.to_string());
            let v = match &item.value {
                crate::yaml::Value::Scalar { text, plain: true } => text.parse::<i64>().ok(),
                _ => None,
            };
            match v {
                Some(v) if !(1..=4094).contains(&v) => {
                    self.err(
                        item.span,
                        &ip,
                        format!("trunks: VLAN id {v} is outside 1 to 4094"),
                        Some("PVE passes VLAN ids 1 to 4094 through an interface"),
                    );
                    ok = false;
                }
                Some(v) if out.contains(&(v as u16)) => {
                    self.err(
                        item.span,
                        &ip,
                        format!("trunks: VLAN {v} is listed twice"),
                        None,
                    );
                    ok = false;
                }
                Some(v) => out.push(v as u16),
                None => {
                    self.err(
                        item.span,
                        &ip,
                        format!("trunks: {} is not a VLAN id", item.kind()),
                        Some("an integer from 1 to 4094"),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// An interface name (`name=` of `netN`): net0's `interface_name`, an extra interface's `name`.
    pub(super) fn iface_name(&mut self, n: &crate::yaml::Node, p: &str) -> Option<String> {
        let s = self.string(n, p)?;
        if syntax::is_bridge_name(&s) {
            Some(s)
        } else {
            self.err(
                n.span,
                p,
                format!("interface name {} is not valid", quote(&s)),
                Some("1 to 15 letters, digits, '-', '_', '.', e.g. eth1"),
            );
            None
        }
    }

    pub(super) fn cidr4(&mut self, s: &str, span: Span, p: &str) -> Option<Ipv4Net> {
        match s.parse::<Ipv4Net>() {
            Ok(c) => {
                if c.prefix_len() < 31 && (c.addr() == c.network() || c.addr() == c.broadcast()) {
                    let which = if c.addr() == c.network() {
                        "network"
                    } else {
                        "broadcast"
                    };
                    self.err(
                        span,
                        p,
                        format!("ip_address {s} is the {which} address of its subnet"),
                        Some("use a host address inside the subnet, e.g. .10 rather than .0"),
                    );
                    return None;
                }
                Some(c)
            }
            Err(_) => {
                let hint = if s.parse::<Ipv4Addr>().is_ok() {
                    format!("add the prefix length, e.g. {s}/24")
                } else {
                    "`dhcp`, `none` or an IPv4 CIDR such as 192.168.7.100/24".to_owned()
                };
                self.err(
                    span,
                    p,
                    format!("ip_address {} is not valid", quote(s)),
                    Some(&hint),
                );
                None
            }
        }
    }

    /// Resolve one interface; `path` is the container path for net0, the extra_interfaces item
    /// path otherwise.
    pub(super) fn interface(
        &mut self,
        n: &NetInput,
        path: &str,
        index: usize,
        primary: bool,
    ) -> Option<Interface> {
        let ip_path = join(path, "ip_address");
        let gw_path = join(path, "gateway");
        let ipv4 = match (n.ip.clone().unwrap_or(IpSpec::Dhcp), n.gateway) {
            (IpSpec::Static(addr), Some(Gw::Addr(gw))) => {
                if !addr.contains(&gw) {
                    self.err_at(
                        &gw_path,
                        format!(
                            "gateway {gw} is outside the subnet {} of ip_address {addr}",
                            addr.trunc()
                        ),
                        Some(&format!(
                            "a gateway inside {}, such as {}",
                            addr.trunc(),
                            first_host(addr)
                        )),
                    );
                    return None;
                }
                if gw == addr.addr() {
                    self.err_at(
                        &gw_path,
                        format!("gateway {gw} is the container's own address"),
                        Some("the router's address on that subnet"),
                    );
                    return None;
                }
                Ipv4Config::Static {
                    addr,
                    gateway: Some(gw),
                }
            }
            (IpSpec::Static(addr), Some(Gw::None)) => Ipv4Config::Static {
                addr,
                gateway: None,
            },
            (IpSpec::Static(addr), None) => {
                if primary {
                    self.err_at(&ip_path,
                        format!("static address {addr} needs a gateway inside {}", addr.trunc()),
                        Some(&format!("add `gateway: {}` (your router), or `gateway: none` for a network without one", first_host(addr))),
                    );
                    return None;
                }
                Ipv4Config::Static {
                    addr,
                    gateway: None,
                }
            }
            (IpSpec::Dhcp, Some(_)) => {
                self.err_at(
                    &gw_path,
                    "a gateway with `ip_address: dhcp` is an error: DHCP provides the gateway",
                    Some("remove `gateway`, or give a static ip_address"),
                );
                return None;
            }
            (IpSpec::None, Some(_)) => {
                self.err_at(
                    &gw_path,
                    "a gateway with `ip_address: none` is an error",
                    Some("remove `gateway`, or give a static ip_address"),
                );
                return None;
            }
            (IpSpec::Dhcp, None) => Ipv4Config::Dhcp,
            (IpSpec::None, None) => Ipv4Config::None,
        };
        let gw6_path = join(path, "gateway6");
        let ipv6 = match (n.ip6.clone().unwrap_or(Ip6Spec::None), n.gateway6) {
            (Ip6Spec::Static(addr), gw) => {
                if let Some(gw) = gw {
                    if !addr.contains(&gw) && !is_link_local6(gw) {
                        self.err_at(
                            &gw6_path,
                            format!(
                                "gateway6 {gw} is outside the subnet {} of ipv6 {addr}",
                                addr.trunc()
                            ),
                            Some("a gateway inside the subnet, or a link-local fe80:: address"),
                        );
                        return None;
                    }
                }
                Ipv6Config::Static { addr, gateway: gw }
            }
            (other, Some(_)) => {
                let mode = match other {
                    Ip6Spec::Auto => "auto",
                    Ip6Spec::Dhcp => "dhcp",
                    _ => "none",
                };
                self.err_at(
                    &gw6_path,
                    format!("a gateway6 with `ipv6: {mode}` is an error"),
                    Some("remove `gateway6`, or give a static ipv6 CIDR"),
                );
                return None;
            }
            (Ip6Spec::Auto, None) if n.host_managed == Some(true) => {
                self.err_at(
                    &join(path, "ipv6"),
                    "`ipv6: auto` with `host_managed: true` is an error: PVE's host-managed interfaces have no SLAAC",
                    Some("`ipv6: dhcp`, a static ipv6 CIDR, or `host_managed: false`"),
                );
                return None;
            }
            (Ip6Spec::Auto, None) => Ipv6Config::Auto,
            (Ip6Spec::Dhcp, None) => Ipv6Config::Dhcp,
            (Ip6Spec::None, None) => Ipv6Config::None,
        };
        Some(Interface {
            name: n.name.clone().unwrap_or_else(|| format!("eth{index}")),
            bridge: n
                .bridge
                .clone()
                .unwrap_or_else(|| DEFAULT_BRIDGE.to_owned()),
            ipv4,
            ipv6,
            vlan_id: n.vlan_id,
            mtu: n.mtu,
            mac_address: n.mac,
            firewall: n.firewall.unwrap_or(false),
            rate_limit: n.rate_limit,
            host_managed: n.host_managed.unwrap_or(false),
            link_down: n.link_down.unwrap_or(false),
            trunks: n.trunks.clone().unwrap_or_default(),
        })
    }
}

pub(super) fn first_host(net: Ipv4Net) -> Ipv4Addr {
    net.hosts().next().unwrap_or(net.addr())
}

pub(super) fn is_link_local6(a: Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}
