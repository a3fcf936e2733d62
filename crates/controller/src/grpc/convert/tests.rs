//! Tests of the conversions between protobuf and controller types.

use super::*;
use crate::testutil::{container, template};

#[test]
fn create_carries_password_and_template_volid() {
    let mut c = container("web");
    c.vm_id = Some(1000);
    let op = Operation {
        id: "op1".into(),
        fleet: "dev".into(),
        container: "web".into(),
        node: "n1".into(),
        vm_id: 1000,
        kind: OperationKind::Create {
            container: Box::new(c),
            template: template(),
        },
        attempt: 1,
        state: OpState::Pending,
        created_ms: 0,
        not_before_ms: 0,
        dispatched_ms: None,
        dispatched_conn: 0,
        deadline_ms: Some(99),
        finished_ms: None,
        last_error: None,
        revision: 1,
        reason: "new".into(),
    };
    let pb_op = operation_pb(&op, Some("s3cret"));
    let Some(pb::operation::Kind::Create(create)) = pb_op.kind else {
        panic!("not a create: {pb_op:?}")
    };
    let spec = create.spec.unwrap();
    assert_eq!(
        (spec.fleet.as_str(), spec.name.as_str(), spec.vm_id),
        ("dev", "web", 1000)
    );
    assert_eq!(spec.template_volid, "local:vztmpl/ubuntu.tar.xz");
    assert_eq!(spec.password.unwrap().value, "s3cret");
    assert_eq!(
        spec.interfaces[0].ipv4.as_ref().unwrap().mode,
        pb::IpMode::Dhcp as i32
    );
    assert_eq!(pb_op.deadline_unix_ms, 99);
    // the redacting Debug keeps the password out of logs
    assert!(!format!("{:?}", operation_pb(&op, Some("s3cret"))).contains("s3cret"));
}

#[test]
fn observed_reads_mark_and_static_addresses() {
    let o = pb::ObservedContainer {
        vm_id: 101,
        power: pb::PowerState::Running as i32,
        managed: true,
        config: Some(pb::ContainerSpec {
            fleet: "dev".into(),
            name: "web".into(),
            hostname: "web".into(),
            memory_mib: 512,
            interfaces: vec![pb::NetworkInterface {
                ipv4: Some(ip_pb(
                    pb::IpMode::Static,
                    "10.0.0.5/24".into(),
                    String::new(),
                )),
                ..Default::default()
            }],
            ..Default::default()
        }),
        addresses: vec![
            "127.0.0.1/8".into(),
            "10.0.0.5/24".into(),
            "fe80::1/64".into(),
            "2001:db8::5/64".into(),
        ],
        ..Default::default()
    };
    let c = observed_from_pb("n1", &o);
    assert_eq!(
        c.managed,
        Some(ManagedBy {
            fleet: "dev".into(),
            name: "web".into()
        })
    );
    assert!(c.running);
    assert_eq!(c.static_addresses, vec!["10.0.0.5".to_string()]);
    assert_eq!(c.ipv4().as_deref(), Some("10.0.0.5"));
    assert_eq!(c.ipv6().as_deref(), Some("2001:db8::5"));
}

#[test]
fn a_clone_template_goes_to_the_agent_as_its_source_without_a_file() {
    let mut t = template();
    t.source = pxfleet_spec::TemplateSource::Clone {
        vm_id: 9000,
        node: "n1".into(),
        full: false,
        datastore_id: None,
    };
    let c = container("web");
    let spec = container_spec("dev", &c, 120, &t, None);
    assert_eq!(spec.template_volid, "");
    assert_eq!(
        spec.clone_source,
        Some(pb::CloneSource {
            vm_id: 9000,
            full: false
        })
    );
}
