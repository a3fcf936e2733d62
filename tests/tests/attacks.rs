//! The attack suite of issue 24: each trust boundary attacked by the weakest role that should be refused, on
//! real processes (controller, agents, pvesim nodes, pxctl). Each test asserts the refusal, that its message
//! says what is wrong and what to do, and that nothing changed. docs/security.md lists what each role may do.

use std::time::Duration;

use pxfleet_tests::{v1 as pb, Cluster};

/// Item 5: a join token made without `--node` enrols new nodes only. Under the name of a node already enrolled
/// and connected it is refused (it would take over that node's identity and stream), the token is not used
/// up, the node stays connected, and a new name still enrols with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_join_token_cannot_enrol_as_an_enrolled_node() {
    let c = Cluster::start(1).await.expect("cluster");
    let dir = c.dir.path().join("attack");
    let token = c.join_token("", 600).await.unwrap();

    let err = c
        .join("mk33", &dir.join("evil"), &token.token)
        .await
        .expect_err("an unbound token enrolled as mk33");
    let text = err.to_string();
    assert!(text.contains("node mk33 is already enrolled"), "{text}");
    assert!(text.contains("pxctl node token create --node mk33"), "{text}");
    assert!(!dir.join("evil/node.pem").exists());

    // mk33's own agent keeps its stream.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nodes = c.nodes_info().await.unwrap();
    let mk33 = nodes.iter().find(|n| n.name == "mk33").unwrap();
    assert_eq!(mk33.status, pb::NodeStatus::Ready as i32, "{mk33:?}");

    // The token was not used up by the refusal: it enrols a new node.
    c.join("mk95", &dir.join("new"), &token.token)
        .await
        .expect("an unbound token enrols a new node");
    assert!(dir.join("new/node.pem").exists());
}
