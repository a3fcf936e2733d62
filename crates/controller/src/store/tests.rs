//! The store on a temporary database: submits, revisions, observed deltas, tokens, sealed secrets, nodes.

use super::*;

fn dc(fleet: &str, name: &str, vm_id: u32) -> DesiredContainer {
    DesiredContainer {
        fleet: fleet.into(),
        name: name.into(),
        node: "n1".into(),
        vm_id,
        container: crate::testutil::container(name),
        template: crate::testutil::template(),
        revision: 0,
        node_pinned: true,
    }
}

fn tx(fleet: &str, expected: Option<u64>, desired: Vec<DesiredContainer>) -> SubmitTx {
    SubmitTx {
        fleet: fleet.into(),
        expected_revision: expected,
        author: "user/alice".into(),
        time_ms: 1,
        spec: crate::store::spec_json(&serde_json::json!({"fleet": fleet})).unwrap(),
        summary: "test".into(),
        desired,
        secrets: [("a".to_string(), "pw".to_string())].into(),
        audit_action: "submit".into(),
        file_name: "fleet.yaml".into(),
        source_sha256: "ab".repeat(32),
        retry: Vec::new(),
    }
}

#[test]
fn submit_writes_everything_and_numbers_revisions() {
    let s = Store::temporary().unwrap();
    assert_eq!(
        s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
            .unwrap(),
        1
    );
    assert_eq!(
        s.submit(&tx(
            "dev",
            Some(1),
            vec![dc("dev", "a", 1000), dc("dev", "b", 1001)]
        ))
        .unwrap(),
        2
    );
    assert_eq!(s.fleet("dev").unwrap().unwrap().revision, 2);
    let revs = s.revisions("dev").unwrap();
    assert_eq!(
        revs.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        revs[1],
        crate::model::Revision {
            fleet: "dev".into(),
            revision: 2,
            author: "user/alice".into(),
            created_ms: 1,
            spec: serde_json::json!({"fleet": "dev"}),
            summary: "test".into(),
            file_name: "fleet.yaml".into(),
            source_sha256: "ab".repeat(32),
        },
        "a revision reads back whole"
    );
    let d = s.desired("dev").unwrap();
    // a is unchanged since revision 1, b was added in 2
    assert_eq!(
        d.iter()
            .map(|d| (d.name.as_str(), d.revision))
            .collect::<Vec<_>>(),
        vec![("a", 1), ("b", 2)]
    );
    assert_eq!(s.secrets("dev").unwrap()["a"], "pw");
    assert_eq!(s.audit_log().unwrap().len(), 2);
}

#[test]
fn moved_revision_is_refused_and_writes_nothing() {
    let s = Store::temporary().unwrap();
    s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
        .unwrap();
    let err = s
        .submit(&tx("dev", Some(0), vec![dc("dev", "z", 1005)]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::RevisionMoved {
                expected: 0,
                actual: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(s.fleet("dev").unwrap().unwrap().revision, 1);
    assert_eq!(s.desired("dev").unwrap()[0].name, "a");
    assert_eq!(s.desired("dev").unwrap().len(), 1);
    assert_eq!(s.revisions("dev").unwrap().len(), 1);
    assert_eq!(s.audit_log().unwrap().len(), 1);
}

#[test]
fn failing_submit_leaves_nothing() {
    let s = Store::temporary().unwrap();
    let err = s
        .submit(&tx(
            "dev",
            Some(0),
            vec![dc("dev", "a", 1000), dc("dev", "b", 1000)],
        ))
        .unwrap_err();
    assert!(err.to_string().contains("share vm_id 1000"), "{err}");
    assert!(s.fleet("dev").unwrap().is_none());
    assert!(s.desired("dev").unwrap().is_empty());
    assert!(s.secrets("dev").unwrap().is_empty());
    assert!(s.revisions("dev").unwrap().is_empty());
    assert!(s.audit_log().unwrap().is_empty());
}

#[test]
fn fleets_with_prefix_names_do_not_mix() {
    let s = Store::temporary().unwrap();
    s.submit(&tx("dev", None, vec![dc("dev", "a", 1000)]))
        .unwrap();
    s.submit(&tx("dev2", None, vec![dc("dev2", "a", 1001)]))
        .unwrap();
    assert_eq!(s.revisions("dev").unwrap().len(), 1);
    assert_eq!(s.all_desired().unwrap().len(), 2);
}

#[test]
fn observed_replace_and_delta() {
    let s = Store::temporary().unwrap();
    let c = |vm_id| ObservedContainer {
        node: "n1".into(),
        vm_id,
        ..ObservedContainer::default()
    };
    assert!(s.replace_observed("n1", &[c(100), c(101)]).unwrap());
    assert!(
        !s.replace_observed("n1", &[c(100), c(101)]).unwrap(),
        "the same report again changes nothing"
    );
    s.replace_observed(
        "n10",
        &[ObservedContainer {
            node: "n10".into(),
            vm_id: 7,
            ..Default::default()
        }],
    )
    .unwrap();
    assert!(s.replace_observed("n1", &[c(102)]).unwrap());
    let mut ids: Vec<u32> = s.all_observed().unwrap().iter().map(|c| c.vm_id).collect();
    ids.sort();
    assert_eq!(ids, vec![7, 102]);
    assert!(s.set_observed("n1", 102, None).unwrap());
    assert!(!s.set_observed("n1", 102, None).unwrap());
    assert!(s.set_observed("n1", 103, Some(&c(103))).unwrap());
    assert!(!s.set_observed("n1", 103, Some(&c(103))).unwrap());
    let mut ids: Vec<u32> = s.all_observed().unwrap().iter().map(|c| c.vm_id).collect();
    ids.sort();
    assert_eq!(ids, vec![7, 103]);
    // point reads: node n1's 103, not n10's 7 under n1, nothing for a removed one
    assert_eq!(s.observed("n1", 103).unwrap().map(|o| o.vm_id), Some(103));
    assert_eq!(
        s.observed("n10", 7).unwrap().map(|o| o.node),
        Some("n10".into())
    );
    assert!(s.observed("n1", 7).unwrap().is_none());
    assert!(s.observed("n1", 102).unwrap().is_none());
}

#[test]
fn token_is_single_use_and_expires() {
    let s = Store::temporary().unwrap();
    let t = |id: &str, expires_ms| TokenRecord {
        id: id.into(),
        hash: format!("hash-{id}"),
        node: "n1".into(),
        created_by: "user/admin".into(),
        created_ms: 0,
        expires_ms,
        used_ms: None,
    };
    s.put_token(&t("h1", 100)).unwrap();
    s.put_token(&t("h2", 100)).unwrap();
    let yes = |_: &TokenRecord| true;
    // a wrong secret does not use the token up
    let wrong = s.consume_token("h1", 50, |t| t.hash == "x");
    assert!(matches!(wrong, Err(StoreError::TokenRefused)));
    assert_eq!(s.consume_token("h1", 50, yes).unwrap().node, "n1");
    let again = s.consume_token("h1", 51, yes);
    assert!(matches!(again, Err(StoreError::TokenRefused)));
    let expired = s.consume_token("h2", 100, yes);
    assert!(matches!(expired, Err(StoreError::TokenRefused)));
    let unknown = s.consume_token("nope", 1, yes);
    assert!(matches!(unknown, Err(StoreError::TokenRefused)));
}

#[test]
fn secrets_are_sealed_in_the_tree_and_clear_ones_are_sealed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let key = dir.path().join("etc/seal.key");
    // a store from before sealing: the secrets tree holds clear JSON
    {
        let old = Store::open(&db).unwrap();
        old.secrets
            .insert(
                "old",
                enc(&BTreeMap::from([(
                    "a".to_string(),
                    "clear-pw-1".to_string(),
                )])),
            )
            .unwrap();
        old.db.flush().unwrap();
    }
    let s = Store::open_sealed(&db, &key).unwrap();
    let raw = s.raw_secrets("old").unwrap().unwrap();
    assert!(crate::seal::is_sealed(&raw));
    assert!(!raw.windows(10).any(|w| w == b"clear-pw-1"));
    assert_eq!(s.secrets("old").unwrap()["a"], "clear-pw-1");
    s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
        .unwrap();
    let raw = s.raw_secrets("dev").unwrap().unwrap();
    assert!(crate::seal::is_sealed(&raw));
    assert!(!raw.windows(2).any(|w| w == b"pw"));
    assert_eq!(s.secrets("dev").unwrap()["a"], "pw");
    // a sealed value copied under another fleet's key does not open
    s.secrets.insert("other", raw.as_slice()).unwrap();
    let err = s.secrets("other").unwrap_err().to_string();
    assert!(err.contains("tampered"), "{err}");
    s.secrets.remove("other").unwrap();
    drop(s);
    // the store without its key: a clear error, not garbage
    std::fs::rename(&key, dir.path().join("moved.key")).unwrap();
    let err = loop {
        match Store::open_sealed(&db, &key) {
            // sled's own threads may hold the file a moment after the last handle is dropped
            Err(StoreError::Sled(_)) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => break e.to_string(),
            Ok(_) => panic!("opened without its seal key"),
        }
    };
    assert!(
        err.contains("is missing") && err.contains("seal.key"),
        "{err}"
    );
    assert!(!key.exists());
}

#[test]
fn node_update_creates_and_modifies() {
    let s = Store::temporary().unwrap();
    s.update_node("n1", |n| n.cordoned = true).unwrap();
    let n = s.update_node("n1", |n| n.last_seen_ms = 5).unwrap();
    assert!(n.cordoned);
    assert_eq!(n.last_seen_ms, 5);
    assert_eq!(s.nodes().unwrap().len(), 1);
}

/// Heartbeats are seen by every reader at once, but the node record is written only when the free memory moved
/// or `LIVENESS_PERSIST_MS` went by; an explicit write of the liveness fields still wins.
#[test]
fn heartbeats_are_seen_at_once_and_written_only_when_something_moved() {
    let s = Store::temporary().unwrap();
    let stored = |s: &Store| -> NodeRecord {
        dec("nodes", b"n1", &s.nodes.get("n1").unwrap().unwrap()).unwrap()
    };
    s.touch_node("n1", 1_000, false, Some(100)).unwrap();
    assert_eq!(
        stored(&s).last_seen_ms,
        1_000,
        "a new node's record is written"
    );
    s.touch_node("n1", 6_000, false, Some(100)).unwrap();
    assert_eq!(s.node("n1").unwrap().unwrap().last_seen_ms, 6_000);
    assert_eq!(s.nodes().unwrap()[0].last_seen_ms, 6_000);
    assert_eq!(
        stored(&s).last_seen_ms,
        1_000,
        "an unchanged heartbeat writes nothing"
    );
    s.touch_node("n1", 7_000, true, None).unwrap();
    assert_eq!(s.node("n1").unwrap().unwrap().last_op_update_ms, 7_000);
    s.touch_node("n1", 8_000, false, Some(90)).unwrap();
    let rec = stored(&s);
    assert_eq!(
        (
            rec.inventory.memory_free_mib,
            rec.last_seen_ms,
            rec.last_op_update_ms
        ),
        (90, 8_000, 7_000),
        "moved free memory is written, with the times kept in memory"
    );
    let later = 8_000 + nodes::LIVENESS_PERSIST_MS;
    s.touch_node("n1", later - 1, false, Some(90)).unwrap();
    assert_eq!(stored(&s).last_seen_ms, 8_000);
    s.touch_node("n1", later, false, Some(90)).unwrap();
    assert_eq!(
        stored(&s).last_seen_ms,
        later,
        "written after LIVENESS_PERSIST_MS"
    );
    s.update_node("n1", |n| n.last_seen_ms = 5).unwrap();
    assert_eq!(s.node("n1").unwrap().unwrap().last_seen_ms, 5);
}

#[test]
fn a_spec_has_hooks_only_when_its_hooks_are_present_and_not_null() {
    let has = |v: serde_json::Value| fleets::spec_has_hooks(&spec_json(&v).unwrap());
    assert!(has(
        serde_json::json!({"fleet": "dev", "hooks": {"ready": [{"name": "n"}]}})
    ));
    assert!(!has(serde_json::json!({"fleet": "dev", "hooks": null})));
    assert!(!has(
        serde_json::json!({"fleet": "dev", "containers": {"hooks": {}}})
    ));
}

#[test]
fn a_revision_stores_the_spec_text_it_was_given_and_reads_it_back_as_json() {
    let s = Store::temporary().unwrap();
    let spec =
        serde_json::json!({"fleet": "dev", "containers": {"web": {"memory": 64}}, "z": 1, "a": 2});
    let mut t = tx("dev", Some(0), vec![]);
    t.spec = spec_json(&spec).unwrap();
    s.submit(&t).unwrap();
    let r = s.revision("dev", 1).unwrap().expect("revision 1");
    assert_eq!(r.spec, spec);
    // Field order is the fleet's own (not sorted), as before.
    let keys: Vec<&String> = r.spec.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["fleet", "containers", "z", "a"]);
}
