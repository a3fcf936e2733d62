//! Template readiness and the digest policy: whether a node can create from a template without seeding first
//! ([`template_ready_on`]), and whether nodes hold different files for one URL template without checksum
//! ([`digest_conflict`]).

use pxfleet_spec::{Checksum, Template, TemplateSource};

use crate::grpc::convert;
use crate::model::NodeRecord;

/// Whether template `name` can be created from on node `n` without seeding first.
/// - An appliance: cached (inventory) or seeded.
/// - A clone of a container: always (nothing to seed; the agent's `pct clone` finds the source or fails).
/// - A volume already in storage: listed in the node's inventory, or found there by a seed operation (which only
///   checks; nothing is downloaded).
/// - A URL with a sha256: cached or seeded, unless the digest the node reported differs from the pin.
/// - A URL without checksum: only once the node reported the file's sha256 (a seed operation hashes a cached
///   file without downloading), so nodes can be compared; a seed by an agent that reports no digest counts.
pub fn template_ready_on(n: &NodeRecord, name: &str, t: &Template) -> bool {
    let volid = convert::template_volid(t);
    let seeded = n.seeded.get(name).map(String::as_str) == Some(volid.as_str());
    let cached = n.inventory.templates.contains(&volid);
    match &t.source {
        TemplateSource::Clone { .. } => true,
        // A volume: nothing to download; its seed operation checks that the node has it.
        TemplateSource::Pveam { .. } | TemplateSource::Volume { .. } => seeded || cached,
        TemplateSource::Url { url, checksum } => {
            let reported = n.template_digests.get(url);
            match checksum {
                None => seeded || reported.is_some(),
                Some(Checksum::Sha256(pin)) => {
                    let differs = reported.is_some_and(|r| !r.sha256.eq_ignore_ascii_case(pin));
                    (seeded || cached) && !differs
                }
                Some(Checksum::Sha512(_)) => seeded || cached,
            }
        }
    }
}

/// Two nodes reported different files for one URL template without checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestConflict {
    /// The node whose file differs from the first report.
    pub node: String,
    pub sha256: String,
    /// The node that reported the URL first, and its digest.
    pub reference_node: String,
    pub reference_sha256: String,
}

impl DigestConflict {
    /// The error a container on the differing node fails with.
    pub fn message(&self, name: &str, url: &str) -> String {
        format!(
            "template {name} ({url}) has no checksum and differs between nodes: {} has sha256 {}, {} has sha256 {}; \
             the URL served different files. Pin the one you want in fleet.yaml: \
             `templates: {name}: {{url: {url}, sha256: {}}}` and use `template: {name}`",
            self.node, self.sha256, self.reference_node, self.reference_sha256, self.reference_sha256
        )
    }
}

/// Whether `node`'s file for `url` differs from the earliest report of that URL by any node.
pub fn digest_conflict(nodes: &[NodeRecord], node: &str, url: &str) -> Option<DigestConflict> {
    let mine = nodes
        .iter()
        .find(|n| n.name == node)?
        .template_digests
        .get(url)?;
    let (ref_node, reference) = nodes
        .iter()
        .filter_map(|n| n.template_digests.get(url).map(|d| (n.name.as_str(), d)))
        .min_by(|a, b| (a.1.recorded_ms, a.0).cmp(&(b.1.recorded_ms, b.0)))?;
    (ref_node != node && !reference.sha256.eq_ignore_ascii_case(&mine.sha256)).then(|| {
        DigestConflict {
            node: node.to_string(),
            sha256: mine.sha256.clone(),
            reference_node: ref_node.to_string(),
            reference_sha256: reference.sha256.clone(),
        }
    })
}

/// The URL of a template without a declared checksum.
pub(crate) fn unpinned_url(t: &Template) -> Option<&str> {
    match &t.source {
        TemplateSource::Url {
            url,
            checksum: None,
        } => Some(url),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, template};

    #[test]
    fn template_readiness_by_source() {
        let mut n = node("n1", 8000);
        let mut t = template();
        n.inventory.templates = vec!["local:vztmpl/ubuntu.tar.xz".into()];
        // without checksum: a cached file is not enough, its digest must be known
        assert!(!template_ready_on(&n, "ubuntu", &t));
        n.template_digests.insert(
            "http://127.0.0.1/ubuntu.tar.xz".into(),
            crate::model::TemplateDigest {
                template: "ubuntu".into(),
                sha256: "aa".repeat(32),
                recorded_ms: 1,
            },
        );
        assert!(template_ready_on(&n, "ubuntu", &t));
        // pinned: cached is enough, unless the node reported another digest
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("aa".repeat(32))),
        };
        assert!(template_ready_on(&n, "ubuntu", &t));
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("cc".repeat(32))),
        };
        assert!(!template_ready_on(&n, "ubuntu", &t));
        // a clone needs no file: ready on a node with nothing cached, never seeded
        n.inventory.templates.clear();
        t.source = pxfleet_spec::TemplateSource::Clone {
            vm_id: 9000,
            node: "n1".into(),
            full: true,
            datastore_id: None,
        };
        assert!(template_ready_on(&n, "gold", &t));
    }
}

/// Where template URLs may point (`[template_urls]` in the controller's configuration): the agent downloads
/// them on the node, as root, so a URL is a request the node makes on a fleet author's behalf. By default any
/// host over http or https except the node itself and its link (loopback, link-local, unspecified addresses,
/// `localhost`): those reach the node's own services (PVE's API, a metadata service), not a template mirror.
#[derive(Debug, Clone, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UrlPolicy {
    /// URL schemes allowed (`http`, `https`).
    pub schemes: Vec<String>,
    /// When not empty, the only hosts allowed: a name or IP literal, `*.example.org` for its subdomains, or
    /// `*` for any host but loopback and link-local ones. A loopback or link-local host is allowed only when
    /// listed itself (`127.0.0.1`, `localhost`).
    pub hosts: Vec<String>,
}

impl Default for UrlPolicy {
    fn default() -> Self {
        UrlPolicy {
            schemes: vec!["http".into(), "https".into()],
            hosts: Vec::new(),
        }
    }
}

/// The host of `url` (`scheme://[user@]host[:port]/...`), lower-case, without brackets or port.
fn url_scheme_host(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    Some((scheme.to_ascii_lowercase(), host.to_ascii_lowercase()))
}

/// An IPv4 address in any form the C library's `inet_aton` takes (what the agent's name lookup does with a
/// numeric host): one to four parts, each decimal, octal (`0` prefix) or hex (`0x`): `2130706433`,
/// `0x7f.1`, `0177.0.0.1` are all 127.0.0.1.
fn inet_aton(host: &str) -> Option<std::net::Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        let n = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            u64::from_str_radix(h, 16).ok()?
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else {
            p.parse::<u64>().ok()?
        };
        nums.push(n);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if room < 64 && *last >= (1u64 << room) {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    v |= last;
    Some(std::net::Ipv4Addr::from(v as u32))
}

/// Whether `host` names the node itself or its link: `localhost`, a loopback, link-local or unspecified IP
/// (in any numeric form a name lookup accepts).
fn local_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    if let Some(ip) = inet_aton(host) {
        return ip.is_loopback() || ip.is_link_local() || ip.is_unspecified();
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.segments()[0] & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_link_local())
        }
        Err(_) => false,
    }
}

/// What a [`UrlPolicy`] guards, for its messages: who fetches the URL and where an admin changes the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlUse {
    /// Template downloads (`[template_urls]`): the agent fetches them on the node, as root.
    Template,
    /// HTTP hooks of operators' fleets (`[hook_urls]`): the controller sends them.
    Hook,
}

impl UrlUse {
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            UrlUse::Template => (
                "template URLs",
                "[template_urls]",
                "template downloads may not reach: the agent would fetch it on the node, as root",
            ),
            UrlUse::Hook => (
                "the URLs of operators' hooks",
                "[hook_urls]",
                "an operator's hook may not reach: the controller would send it from its own host (its metrics, \
                 a metadata service)",
            ),
        }
    }
}

impl UrlPolicy {
    /// Why `url` may not be downloaded, or `None` when it may.
    pub fn refusal(&self, url: &str) -> Option<String> {
        self.refusal_as(url, UrlUse::Template)
    }

    /// Why `url` may not be used for `what`, or `None` when it may.
    pub fn refusal_as(&self, url: &str, what: UrlUse) -> Option<String> {
        let (noun, section, local_why) = what.words();
        let Some((scheme, host)) = url_scheme_host(url) else {
            return Some("it is not a URL".into());
        };
        if !self.schemes.iter().any(|s| s.eq_ignore_ascii_case(&scheme)) {
            return Some(format!(
                "the controller allows {noun} with {} only, not {scheme}:// (an admin sets {section} schemes in \
                 the controller's configuration)",
                self.schemes.join(", ")
            ));
        }
        let listed = |h: &str| {
            self.hosts.iter().any(|p| {
                let p = p.to_ascii_lowercase();
                p == h
                    || p.strip_prefix("*.")
                        .is_some_and(|s| h.ends_with(&format!(".{s}")))
            })
        };
        if local_host(&host) {
            if listed(&host) {
                return None;
            }
            return Some(format!(
                "its host {host} is the {} itself or its link (loopback or link-local), which {local_why}; an \
                 admin who means it lists the host under {section} hosts",
                if what == UrlUse::Template { "node" } else { "controller" }
            ));
        }
        if self.hosts.is_empty() || self.hosts.iter().any(|p| p == "*") || listed(&host) {
            return None;
        }
        Some(format!(
            "its host {host} is not among the hosts the controller allows for {noun} ({}); an admin adds it \
             under {section} hosts",
            self.hosts.join(", ")
        ))
    }

    /// Diagnostics for every template of `fleet` whose URL the policy refuses.
    pub fn check_fleet(
        &self,
        file: &str,
        fleet: &pxfleet_spec::Fleet,
    ) -> Vec<pxfleet_spec::Diagnostic> {
        let mut out = Vec::new();
        for (name, t) in &fleet.templates {
            let TemplateSource::Url { url, .. } = &t.source else {
                continue;
            };
            if let Some(why) = self.refusal(url) {
                let path = format!("templates.{name}.url");
                let span = fleet.spans.lookup(&path);
                out.push(pxfleet_spec::Diagnostic::new(
                    file,
                    span,
                    path,
                    format!("template {name}: {url} is refused: {why}"),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod url_policy_tests {
    use super::*;

    #[test]
    fn the_default_refuses_the_node_itself_and_its_link() {
        let p = UrlPolicy::default();
        for url in [
            "http://127.0.0.1:8006/x.tar.xz",
            "http://localhost/x.tar.xz",
            "https://LOCALHOST./x.tar.xz",
            "http://169.254.169.254/latest/x.tar.xz",
            "http://[::1]:8006/x.tar.xz",
            "http://[fe80::1]/x.tar.xz",
            "http://[::ffff:127.0.0.1]/x.tar.xz",
            "http://0.0.0.0/x.tar.xz",
            "http://2130706433/x.tar.xz",
            "http://0x7f.1/x.tar.xz",
            "http://0177.0.0.1/x.tar.xz",
            "http://127.1/x.tar.xz",
            "http://user@127.0.0.2/x.tar.xz",
            "ftp://mirror.example.org/x.tar.xz",
        ] {
            assert!(p.refusal(url).is_some(), "{url}");
        }
        for url in [
            "https://images.linuxcontainers.org/x.tar.xz",
            "http://10.0.0.5:8080/x.tar.xz",
            "http://[2001:db8::1]/x.tar.xz",
        ] {
            assert_eq!(p.refusal(url), None, "{url}");
        }
        let why = p.refusal("http://127.0.0.1:8006/x.tar.xz").unwrap();
        assert!(why.contains("[template_urls] hosts"), "{why}");
    }

    #[test]
    fn an_allowlist_admits_its_hosts_only_and_loopback_only_by_name() {
        let p = UrlPolicy {
            schemes: vec!["https".into()],
            hosts: vec!["*.example.org".into(), "127.0.0.1".into()],
        };
        assert_eq!(p.refusal("https://mirror.example.org/x.tar.xz"), None);
        assert_eq!(p.refusal("https://127.0.0.1:8443/x.tar.xz"), None);
        assert!(p.refusal("https://example.org.evil.net/x.tar.xz").is_some());
        assert!(p.refusal("http://mirror.example.org/x.tar.xz").is_some());
        assert!(p.refusal("https://[::1]/x.tar.xz").is_some());
        let any = UrlPolicy {
            hosts: vec!["*".into()],
            ..UrlPolicy::default()
        };
        assert_eq!(any.refusal("https://anything.example/x.tar.xz"), None);
        assert!(any.refusal("http://127.0.0.1/x.tar.xz").is_some());
    }
}
