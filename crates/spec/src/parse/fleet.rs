//! The top level of `fleet.yaml`: `fleet`, `drift`, `allow_privileged`, `defaults`,
//! `templates`, `containers`, `policies` and `hooks`, decoded in order and each container
//! merged over `defaults` then resolved.

use std::collections::BTreeMap;

use super::input::ContainerInput;
use super::{join, quote, Cx, TOP_FIELDS};
use crate::model::*;
use crate::syntax;
use crate::yaml::{Node, Value};

impl Cx<'_> {
    pub(super) fn fleet(&mut self, root: &Node) -> Option<Fleet> {
        let es = match &root.value {
            Value::Map(es) => es,
            _ => {
                self.err(
                    root.span,
                    "",
                    format!("a fleet file must be a mapping, got {}", root.kind()),
                    Some("start the file with `fleet: NAME`, then `containers:`"),
                );
                return None;
            }
        };
        let mut name = None;
        let mut allow_privileged = false;
        let mut defaults = None;
        let mut fleet_drift = None;
        let mut templates_node = None;
        let mut containers_node = None;
        let mut hooks_node = None;
        for e in es {
            let path = e.key.as_str();
            self.record(path, e.value.span);
            match path {
                "fleet" => {
                    if let Some(s) = self.string(&e.value, path) {
                        if syntax::is_fleet_name(&s) {
                            name = Some(s);
                        } else {
                            self.err(
                                e.value.span,
                                path,
                                format!("fleet name {} is not valid", quote(&s)),
                                Some("use lower-case letters, digits and '-' (at most 63), e.g. dev or prod-eu"),
                            );
                        }
                    }
                }
                "allow_privileged" => allow_privileged = self.boolean(&e.value, path).unwrap_or(false),
                "drift" => fleet_drift = self.drift_policy(&e.value, path),
                "defaults" => {
                    if let Some(des) = self.map(&e.value, path) {
                        defaults = Some(self.container_input(des, "defaults", true));
                    }
                }
                "templates" => templates_node = Some(&e.value),
                "containers" => containers_node = Some(e),
                // Read and checked by `policies::read_policies` (they are not part of the fleet's spec).
                "policies" => {}
                "hooks" => hooks_node = Some(&e.value),
                "lxc_configs" => self.err(
                    e.key_span,
                    path,
                    "unknown field 'lxc_configs'; did you mean 'containers'?",
                    Some("pxfleet calls the Terraform lxc_configs map `containers`; the fields inside keep their names"),
                ),
                _ => self.unknown_field(e, "", TOP_FIELDS),
            }
        }
        if name.is_none() && !es.iter().any(|e| e.key == "fleet") {
            self.err(
                root.span,
                "fleet",
                "missing field 'fleet' (the fleet's name)",
                Some("add `fleet: dev` (lower-case letters, digits, '-') at the top"),
            );
        }
        let mut templates = BTreeMap::new();
        if let Some(n) = templates_node {
            if let Some(tes) = self.map(n, "templates") {
                for e in tes {
                    let path = join("templates", &e.key);
                    self.record(&path, e.key_span);
                    if !syntax::is_simple_name(&e.key) {
                        self.err(
                            e.key_span,
                            &path,
                            format!("template name {} is not valid", quote(&e.key)),
                            Some("use letters, digits, '.', '_', '-'"),
                        );
                        continue;
                    }
                    if let Some(t) = self.template(&e.value, &path) {
                        templates.insert(e.key.clone(), t);
                    }
                }
            }
        }
        let hooks = hooks_node.map(|n| self.hooks(n)).unwrap_or_default();
        let mut defaults: ContainerInput = defaults.unwrap_or_default();
        // Top-level `drift:` is the fleet's; `defaults.drift` and a container's own override it.
        defaults.drift = defaults.drift.or(fleet_drift);
        // Everything but the containers is decoded: sort those positions now, so lookups
        // during container resolution find them (see `lookup`).
        self.set_aside_spans();
        let mut containers = BTreeMap::new();
        match containers_node {
            None => self.err(
                root.span,
                "containers",
                "missing field 'containers'",
                Some("add `containers:` with one entry per container (`containers: {}` for an empty fleet)"),
            ),
            Some(ce) => {
                if let Some(ces) = self.map(&ce.value, "containers") {
                    let declared: Vec<String> = templates.keys().cloned().collect();
                    for e in ces {
                        let path = join("containers", &e.key);
                        self.container_start = self.recorded.raw_len();
                        self.record(&path, e.key_span);
                        if !syntax::is_dns_label(&e.key) {
                            self.err(
                                e.key_span,
                                &path,
                                format!("container name {} is not a valid host name label", quote(&e.key)),
                                Some("use letters, digits and '-' (1 to 63, not starting or ending with '-'), e.g. web-1"),
                            );
                            continue;
                        }
                        let Some(cmap) = self.map(&e.value, &path) else {
                            continue;
                        };
                        let input = self.container_input(cmap, &path, false);
                        let merged = input.over(&defaults);
                        if let Some(c) = self.resolve(&e.key, &path, merged, allow_privileged, &declared, &mut templates) {
                            containers.insert(e.key.clone(), c);
                        }
                    }
                }
            }
        }
        let names: Vec<&str> = containers.keys().map(String::as_str).collect();
        self.check_hook_containers(&hooks, &names);
        Some(Fleet {
            name: name.unwrap_or_default(),
            allow_privileged,
            templates,
            containers,
            hooks,
            spans: Spans::default(),
        })
    }
}
