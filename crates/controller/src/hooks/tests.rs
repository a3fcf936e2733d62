//! Which hooks a fleet has: the flag its record keeps at each submit, and the worker's lookup that trusts it
//! (a fleet without hooks is known without reading its revision) or falls back to the revisions.

use std::collections::HashMap;

use super::fleet_hooks;
use crate::store::SubmitTx;
use crate::testutil::test_state;

/// Fleet `dev`'s normalised spec, with a `ready` hook `note` when `hooked`.
fn spec(hooked: bool) -> serde_json::Value {
    let hooks = if hooked {
        "hooks:\n  note:\n    on: ready\n    containers: [web]\n    command: [/bin/true]\n"
    } else {
        ""
    };
    let yaml = format!(
        "fleet: dev\ntemplates: {{deb: {{pveam: debian-12-standard_12.7-1_amd64.tar.zst}}}}\n\
         defaults: {{template: deb, datastore_id: local-lvm, memory: 512}}\ncontainers:\n  web: {{}}\n{hooks}"
    );
    let fleet = pxfleet_spec::parse_fleet("fleet.yaml", &yaml, &pxfleet_spec::NoFiles).unwrap();
    serde_json::to_value(&fleet).unwrap()
}

/// Stores the next revision of `dev` with `spec`, from a file or (`file` empty) made by the controller itself.
fn submit(st: &crate::state::State, spec: serde_json::Value, file: &str) {
    let rev = st.store.fleet("dev").unwrap().map(|f| f.revision);
    st.store
        .submit(&SubmitTx {
            fleet: "dev".into(),
            expected_revision: Some(rev.unwrap_or(0)),
            author: "test".into(),
            time_ms: 0,
            spec: crate::store::spec_json(&spec).unwrap(),
            summary: String::new(),
            desired: vec![],
            secrets: Default::default(),
            audit_action: "submit".into(),
            file_name: file.into(),
            source_sha256: String::new(),
            retry: Vec::new(),
        })
        .unwrap();
}

fn hook_names(st: &crate::state::State) -> Vec<String> {
    fleet_hooks(st, "dev", &mut HashMap::new())
        .iter()
        .map(|h| h.name.clone())
        .collect()
}

#[test]
fn the_fleet_record_says_whether_the_fleet_has_hooks_and_the_worker_finds_the_same() {
    let st = test_state();
    let has_hooks = || st.store.fleet("dev").unwrap().unwrap().has_hooks;
    // (spec with hooks, from a file, flag expected): a revision the controller makes itself (power, destroy;
    // no file) without hooks in its spec keeps what the revision before had.
    let steps = [
        (false, "", Some(false)),
        (true, "fleet.yaml", Some(true)),
        (false, "", Some(true)),
        (false, "fleet.yaml", Some(false)),
        (false, "", Some(false)),
        (true, "", Some(true)),
    ];
    for (i, (hooked, file, want)) in steps.into_iter().enumerate() {
        submit(&st, spec(hooked), file);
        assert_eq!(has_hooks(), want, "step {i}");
        let expected: Vec<String> = if want == Some(true) {
            vec!["note".into()]
        } else {
            vec![]
        };
        assert_eq!(hook_names(&st), expected, "step {i}");
    }
}

#[test]
fn a_record_without_hooks_is_trusted_and_an_older_record_reads_the_revisions() {
    let st = test_state();
    submit(&st, spec(true), "fleet.yaml");
    assert_eq!(hook_names(&st), vec!["note".to_string()]);
    let fleets = st.store.sled_db().open_tree("fleets").unwrap();
    let mut record = st.store.fleet("dev").unwrap().unwrap();
    // The record says none: the revision (which names a hook) is not read.
    record.has_hooks = Some(false);
    fleets
        .insert("dev", serde_json::to_vec(&record).unwrap())
        .unwrap();
    assert!(hook_names(&st).is_empty());
    // A record written before the flag was kept has no `has_hooks`: the revision is read.
    record.has_hooks = None;
    let old = serde_json::to_value(&record).unwrap();
    assert!(old.get("has_hooks").is_none(), "{old}");
    fleets
        .insert("dev", serde_json::to_vec(&old).unwrap())
        .unwrap();
    assert_eq!(hook_names(&st), vec!["note".to_string()]);
}
