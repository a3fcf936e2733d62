//! `templates:` entries (a URL with its checksum, or a `pveam` name, and where to store and
//! seed it) and the inline templates that a container's `template_url` shortcut stands for.

use std::collections::BTreeMap;

use sha2::Digest as _;

use super::{join, quote, Cx, CLONE_FIELDS, TEMPLATE_FIELDS};
use crate::model::*;
use crate::syntax;
use crate::yaml::Node;

impl Cx<'_> {
    pub(super) fn template(&mut self, n: &Node, path: &str) -> Option<Template> {
        let es = self.map(n, path)?;
        let mut url = None;
        let mut sha256 = None;
        let mut sha512 = None;
        let mut storage = None;
        let mut pveam = None;
        let mut volume: Option<(String, String)> = None;
        let mut clone: Option<TemplateSource> = None;
        let mut storage_span = None;
        let mut seed = TemplateSeed::OnDemand;
        let mut seed_span = None;
        let mut ok = true;
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, TEMPLATE_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "url" => match self.string(&e.value, &p) {
                    Some(u) => match syntax::check_template_url(&u) {
                        Ok(()) => url = Some(u),
                        Err(right) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("url {} is not a usable template URL", quote(&u)),
                                Some(&format!("expected {right}")),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "sha256" | "sha512" => {
                    let len = if e.key == "sha256" { 64 } else { 128 };
                    match self.string(&e.value, &p) {
                        Some(h) => match syntax::check_hex(&h, len) {
                            Ok(h) => {
                                let c = if len == 64 {
                                    Checksum::Sha256(h)
                                } else {
                                    Checksum::Sha512(h)
                                };
                                if len == 64 {
                                    sha256 = Some((c, e.key_span));
                                } else {
                                    sha512 = Some((c, e.key_span));
                                }
                            }
                            Err(right) => {
                                self.err(e.value.span, &p, format!("{} checksum is not valid: expected {right}", e.key), Some("copy the checksum from the image's SHA256SUMS / SHA512SUMS file"));
                                ok = false;
                            }
                        },
                        None => ok = false,
                    }
                }
                "storage" => match self.string(&e.value, &p) {
                    Some(s) if syntax::is_storage_id(&s) => {
                        storage = Some(s);
                        storage_span = Some(e.key_span);
                    }
                    Some(s) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("storage {} is not a PVE storage id", quote(&s)),
                            Some("a storage id such as local or nfs-templates"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "seed" => match self.string(&e.value, &p).as_deref() {
                    Some("on_demand") => seed = TemplateSeed::OnDemand,
                    Some("all_nodes") => {
                        seed = TemplateSeed::AllNodes;
                        seed_span = Some(e.key_span);
                    }
                    Some(other) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("seed {} is not a seeding mode", quote(other)),
                            Some("expected on_demand (the default) or all_nodes"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "pveam" => match self.string(&e.value, &p) {
                    Some(a) => match syntax::check_template_file_name(&a) {
                        Ok(()) => pveam = Some(a),
                        Err(right) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("appliance {} is not a template file name", quote(&a)),
                                Some(&format!("expected {right} (see `pveam available`)")),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "volume" => {
                    match self.string(&e.value, &p) {
                        Some(v) => match template_volid(&v) {
                            Ok(storage) => volume = Some((v, storage)),
                            Err(right) => {
                                self.err(
                                e.value.span,
                                &p,
                                format!("volume {} is not a template volume id", quote(&v)),
                                Some(&format!("expected {right} (see `pvesm list STORAGE --content vztmpl`)")),
                            );
                                ok = false;
                            }
                        },
                        None => ok = false,
                    }
                }
                "clone" => match self.clone_source(&e.value, &p) {
                    Some(c) => clone = Some(c),
                    None => ok = false,
                },
                _ => {
                    self.unknown_field(e, path, TEMPLATE_FIELDS);
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let at = self.lookup(path);
        if let Some(source) = clone {
            let others = [
                ("url", url.is_some()),
                ("pveam", pveam.is_some()),
                ("volume", volume.is_some()),
                ("sha256", sha256.is_some()),
                ("sha512", sha512.is_some()),
                ("storage", storage_span.is_some()),
                ("seed", seed_span.is_some()),
            ];
            if let Some((other, _)) = others.iter().find(|(_, given)| *given) {
                self.err(
                    at,
                    path,
                    format!("a template has either `clone` or `{other}`, not both"),
                    Some("`clone` copies an existing container; nothing is downloaded, stored or seeded"),
                );
                return None;
            }
            return Some(Template {
                source,
                storage: String::new(),
                seed: TemplateSeed::OnDemand,
            });
        }
        if let Some((volid, vol_storage)) = volume {
            return self.volume_template(
                path,
                at,
                volid,
                vol_storage,
                &[
                    ("url", url.is_some()),
                    ("pveam", pveam.is_some()),
                    ("sha256", sha256.is_some()),
                    ("sha512", sha512.is_some()),
                ],
                storage_span,
                seed_span,
            );
        }
        let storage = storage.unwrap_or_else(|| DEFAULT_TEMPLATE_STORAGE.to_owned());
        match (url, pveam) {
            (Some(_), Some(_)) => {
                self.err(
                    at,
                    path,
                    "a template has either `url` or `pveam`, not both",
                    None,
                );
                None
            }
            (None, None) => {
                self.err(
                    at,
                    path,
                    "a template needs `url` (with `sha256` or `sha512`), `pveam` (an appliance name) `volume` (a file already in storage) or `clone` (a container to copy)",
                    Some("e.g. `pveam: debian-12-standard_12.7-1_amd64.tar.zst`"),
                );
                None
            }
            (Some(url), None) => {
                let checksum = match (sha256, sha512) {
                    (Some(_), Some((_, sp))) => {
                        self.err(
                            sp,
                            &join(path, "sha512"),
                            "give one checksum, `sha256` or `sha512`, not both",
                            None,
                        );
                        return None;
                    }
                    (Some((c, _)), None) | (None, Some((c, _))) => c,
                    (None, None) => {
                        self.err(
                            at,
                            path,
                            "a url template needs a checksum: `sha256` or `sha512`",
                            Some("the agent verifies the download against it; take it from the image's SHA256SUMS"),
                        );
                        return None;
                    }
                };
                Some(Template {
                    source: TemplateSource::Url {
                        url,
                        checksum: Some(checksum),
                    },
                    storage,
                    seed,
                })
            }
            (None, Some(appliance)) => {
                if let Some((_, sp)) = sha256.or(sha512) {
                    self.err(sp, path, "a checksum applies to `url` templates only; pveam verifies its appliances itself", None);
                    return None;
                }
                Some(Template {
                    source: TemplateSource::Pveam { appliance },
                    storage,
                    seed,
                })
            }
        }
    }
}

impl Cx<'_> {
    /// `clone: {vm_id, node, full, datastore_id}`.
    fn clone_source(&mut self, n: &Node, path: &str) -> Option<TemplateSource> {
        let es = self.map(n, path)?;
        let (mut vm_id, mut node, mut full, mut datastore_id) = (None, None, true, None);
        let mut ds_span = None;
        let mut ok = true;
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, CLONE_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "vm_id" => match self.int(&e.value, &p, 100, 999_999_999, "") {
                    Some(v) => vm_id = Some(v as u32),
                    None => ok = false,
                },
                "node" => match self.string(&e.value, &p) {
                    Some(h) if syntax::is_dns_label(&h) => node = Some(h),
                    Some(h) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("node {} is not a PVE node name", quote(&h)),
                            Some("the short host name of the node that holds the container to clone, e.g. pve1"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "full" => match self.boolean(&e.value, &p) {
                    Some(b) => full = b,
                    None => ok = false,
                },
                "datastore_id" => match self.string(&e.value, &p) {
                    Some(s) if syntax::is_storage_id(&s) => {
                        datastore_id = Some(s);
                        ds_span = Some(e.key_span);
                    }
                    Some(s) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("datastore_id {} is not a PVE storage id", quote(&s)),
                            Some("a storage id with rootdir content, such as local-lvm"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => {
                    self.unknown_field(e, path, CLONE_FIELDS);
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        if let (false, Some(sp)) = (full, ds_span) {
            self.err(
                sp,
                &join(path, "datastore_id"),
                "`datastore_id` applies to full clones only: a linked clone's disk stays on the template's storage",
                Some("remove `datastore_id`, or set `full: true` to copy the disk there"),
            );
            return None;
        }
        let at = self.lookup(path);
        let (Some(vm_id), Some(node)) = (vm_id, node) else {
            self.err(
                at,
                path,
                "a clone template needs `vm_id` and `node`: the container to copy and the node it is on",
                Some("e.g. `clone: {vm_id: 9000, node: pve1}`"),
            );
            return None;
        };
        Some(TemplateSource::Clone {
            vm_id,
            node,
            full,
            datastore_id,
        })
    }
}

/// `STORAGE:vztmpl/FILE`: its storage, or what was expected.
fn template_volid(v: &str) -> Result<String, String> {
    let right = "STORAGE:vztmpl/FILE, e.g. local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst";
    let (storage, file) = v.split_once(":vztmpl/").ok_or_else(|| right.to_owned())?;
    if !syntax::is_storage_id(storage) {
        return Err(right.to_owned());
    }
    syntax::check_template_file_name(file)?;
    Ok(storage.to_owned())
}

impl Cx<'_> {
    /// A `volume:` template: nothing else says where it comes from, its storage is the volume's, nothing is
    /// seeded.
    #[allow(clippy::too_many_arguments)]
    fn volume_template(
        &mut self,
        path: &str,
        at: Span,
        volid: String,
        storage: String,
        others: &[(&str, bool)],
        storage_span: Option<Span>,
        seed_span: Option<Span>,
    ) -> Option<Template> {
        if let Some((other, _)) = others.iter().find(|(_, given)| *given) {
            self.err(
                at,
                path,
                format!("a template has either `volume` or `{other}`, not both"),
                Some("`volume` names a file already in storage; nothing is downloaded or verified"),
            );
            return None;
        }
        if let Some(sp) = storage_span {
            self.err(
                sp,
                &join(path, "storage"),
                "`storage` does not apply to a `volume` template: the volume id names its storage",
                None,
            );
            return None;
        }
        if let Some(sp) = seed_span {
            self.err(
                sp,
                &join(path, "seed"),
                "`seed: all_nodes` does not apply to a `volume` template: nothing is downloaded",
                Some("put the file on each node's storage yourself, or use a shared storage"),
            );
            return None;
        }
        Some(Template {
            source: TemplateSource::Volume { volid },
            storage,
            seed: TemplateSeed::OnDemand,
        })
    }
}

/// Add (or find) the template a `template_url` shortcut stands for. Its name is the URL's file
/// name, with a short hash of the URL appended if that name is taken by a different template.
pub(super) fn inline_template(url: String, templates: &mut BTreeMap<String, Template>) -> String {
    let t = Template {
        source: TemplateSource::Url {
            url: url.clone(),
            checksum: None,
        },
        storage: DEFAULT_TEMPLATE_STORAGE.to_owned(),
        seed: TemplateSeed::OnDemand,
    };
    let base = url_file_name(&url).to_owned();
    let hash = hex::encode(&sha2::Sha256::digest(url.as_bytes())[..4]);
    for name in [base.clone(), format!("{base}-{hash}")] {
        match templates.get(&name) {
            Some(existing) if *existing == t => return name,
            Some(_) => continue,
            None => {
                templates.insert(name.clone(), t);
                return name;
            }
        }
    }
    // Both taken by other templates: fall back to the full hash (cannot collide in practice).
    let name = format!(
        "{base}-{}",
        hex::encode(sha2::Sha256::digest(url.as_bytes()))
    );
    templates.insert(name.clone(), t);
    name
}
