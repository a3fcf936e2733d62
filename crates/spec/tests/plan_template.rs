//! `state: template` (bpg's `template = true`, PVE's `pct template`): what the planner decides for a container that
//! is or becomes a template, as `pxctl plan` shows it.

mod plan_support;

use plan_support::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::*;

fn kinds(p: &Plan) -> Vec<(String, &'static str)> {
    p.actions
        .iter()
        .map(|a| (a.container.clone(), a.kind.verb()))
        .collect()
}

fn template(name: &str, vm_id: u32) -> Container {
    let mut c = container(name, Some(vm_id));
    c.state = DesiredState::Template;
    c
}

#[test]
fn a_template_is_created_as_one_and_the_plan_is_empty_after() {
    let f = fleet("dev", vec![template("gold", 9000)]);
    let p = plan(&f, None, &[]).unwrap();
    assert_eq!(kinds(&p), vec![("gold".into(), "create")]);
    let ActionKind::Create { attributes, .. } = &p.actions[0].kind else {
        unreachable!()
    };
    let state = attributes
        .iter()
        .find(|a| a.field == "state")
        .expect("state");
    assert_eq!(state.value, Some(serde_json::json!("template")));
    // What the node reports after the create: a stopped template. Nothing is left to do (no start).
    let obs = observe(&f, PowerState::Stopped);
    assert!(obs[0].config.is_template);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(p.actions.is_empty(), "{:?}", kinds(&p));
}

#[test]
fn a_running_container_becomes_a_template_in_place() {
    let applied = fleet("dev", vec![container("gold", Some(9000))]);
    let obs = observe(&applied, PowerState::Running);
    let want = fleet("dev", vec![template("gold", 9000)]);
    let p = plan(&want, Some(&applied), &obs).unwrap();
    // No replacement: its disks are kept; the update converts it and the stop says it will not run again.
    assert_eq!(
        kinds(&p),
        vec![("gold".into(), "update"), ("gold".into(), "stop")]
    );
    let ActionKind::Update {
        changes,
        restart_required,
    } = &p.actions[0].kind
    else {
        unreachable!()
    };
    assert!(!restart_required, "a template is never started again");
    let c = changes.iter().find(|c| c.field == "state").expect("state");
    assert_eq!(c.from, Some(serde_json::json!("running")));
    assert_eq!(c.to, Some(serde_json::json!("template")));
    // Once converted, the plan is empty.
    let after = observe(&want, PowerState::Stopped);
    let p = plan(&want, Some(&want), &after).unwrap();
    assert!(p.actions.is_empty(), "{:?}", kinds(&p));
}

#[test]
fn a_template_cannot_become_a_container_again_without_a_replacement() {
    let applied = fleet("dev", vec![template("gold", 9000)]);
    let obs = observe(&applied, PowerState::Stopped);
    for state in [DesiredState::Running, DesiredState::Stopped] {
        let mut c = container("gold", Some(9000));
        c.state = state;
        let p = plan(&fleet("dev", vec![c.clone()]), Some(&applied), &obs).unwrap();
        assert_eq!(kinds(&p), vec![("gold".into(), "replace")], "{state:?}");
        let ActionKind::Replace { reasons, .. } = &p.actions[0].kind else {
            unreachable!()
        };
        let r = reasons.iter().find(|r| r.field == "state").expect("state");
        assert!(
            r.why
                .as_deref()
                .is_some_and(|w| w.contains("cannot turn a template back")),
            "{r:?}"
        );
        // Protected, the plan refuses instead of replacing.
        let mut protected = obs.clone();
        protected[0].config.protection = true;
        c.protection = true;
        let err = plan(&fleet("dev", vec![c]), Some(&applied), &protected).unwrap_err();
        assert!(err.to_string().contains("state"), "{err}");
    }
}

#[test]
fn other_changes_on_a_template_apply_without_a_start() {
    let applied = fleet("dev", vec![template("gold", 9000)]);
    let obs = observe(&applied, PowerState::Stopped);
    let mut c = template("gold", 9000);
    c.memory = 2048;
    let p = plan(&fleet("dev", vec![c]), Some(&applied), &obs).unwrap();
    assert_eq!(kinds(&p), vec![("gold".into(), "update")]);
    let ActionKind::Update {
        restart_required, ..
    } = &p.actions[0].kind
    else {
        unreachable!()
    };
    assert!(!restart_required);
}
