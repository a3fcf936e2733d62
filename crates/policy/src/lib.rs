//! pxfleet-policy: policy as code for fleets. The Rego files a fleet names under `policies:` are evaluated
//! in-process with `regorus`, with `input = {"fleet": FLEET, "plan": PLAN}` (the fleet as parsed, without
//! secrets; the plan document of docs/plan-json.md).
//!
//! Conventions (those of conftest): every rule of the policy's package named `deny` or `deny_*` is a set of
//! denials, `warn` / `warn_*` a set of warnings. An entry is a string (the message) or an object
//! `{"msg": "...", "container": "NAME"}`. A denial names the policy (its path as written in fleet.yaml), the
//! rule and the container (when the entry names one).
//!
//! ```
//! use pxfleet_policy::{evaluate, Policy};
//! let p = Policy { path: "p.rego".into(), source: "package t\ndeny contains {\"msg\": \"too big\", \"container\": n} if {\n  some n, c in input.fleet.containers\n  c.memory > 1024\n}\n".into() };
//! let input = serde_json::json!({"fleet": {"containers": {"web": {"memory": 2048}}}, "plan": {}});
//! let out = evaluate(&[p], &input).unwrap();
//! assert_eq!(out.denials()[0].to_string(), "p.rego: deny: container web: too big");
//! ```

use serde_json::Value;

/// One policy file: its path as written in fleet.yaml and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub path: String,
    pub source: String,
}

/// Whether a result stops the submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Deny,
    Warn,
}

/// One entry of a `deny*` or `warn*` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub policy: String,
    pub rule: String,
    pub container: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: ", self.policy, self.rule)?;
        if let Some(c) = &self.container {
            write!(f, "container {c}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// What evaluating every policy gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The policies evaluated, in order.
    pub policies: Vec<String>,
    pub findings: Vec<Finding>,
}

impl Outcome {
    pub fn denials(&self) -> Vec<&Finding> {
        self.findings
            .iter()
            .filter(|f| f.level == Level::Deny)
            .collect()
    }
    pub fn denied(&self) -> bool {
        self.findings.iter().any(|f| f.level == Level::Deny)
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// The policy does not parse or compile; `line`/`column` are 0 when the engine gave none.
    #[error("{policy}:{line}:{column}: {message}")]
    Invalid {
        policy: String,
        line: u32,
        column: u32,
        message: String,
    },
    /// Evaluation failed (a built-in error, a conflict between rule values, ...).
    #[error("{policy}: evaluation failed: {message}")]
    Eval { policy: String, message: String },
}

/// regorus' error format (`--> path:LINE:COL`, the source line, `error: message`) turned into one line.
fn located(policy: &str, text: &str) -> PolicyError {
    let mut line = 0;
    let mut column = 0;
    let mut message = String::new();
    let mut excerpt = String::new();
    for l in text.lines() {
        let t = l.trim();
        if let Some(at) = t.strip_prefix("--> ") {
            let mut parts = at.rsplitn(3, ':');
            if let (Some(c), Some(n)) = (parts.next(), parts.next()) {
                column = c.trim().parse().unwrap_or(0);
                line = n.trim().parse().unwrap_or(0);
            }
        } else if let Some(m) = t.strip_prefix("error:") {
            message = m.trim().to_string();
        } else if let Some((n, src)) = t.split_once('|') {
            if !n.trim().is_empty() && !src.trim().is_empty() && excerpt.is_empty() {
                excerpt = src.trim().to_string();
            }
        }
    }
    if message.is_empty() {
        message = text.trim().lines().last().unwrap_or_default().to_string();
    }
    if !excerpt.is_empty() {
        message.push_str(&format!(" (at `{excerpt}`)"));
    }
    PolicyError::Invalid {
        policy: policy.to_string(),
        line,
        column,
        message,
    }
}

/// The input document policies see: `{"fleet": FLEET, "plan": PLAN}`, from the fleet as serialised by
/// pxfleet-spec (its source spans and every container's `password` removed: secrets never reach a policy)
/// and the plan document.
pub fn input(mut fleet: Value, plan: Value) -> Value {
    if let Some(m) = fleet.as_object_mut() {
        m.remove("spans");
        if let Some(cs) = m.get_mut("containers").and_then(Value::as_object_mut) {
            for c in cs.values_mut() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("password");
                }
            }
        }
    }
    serde_json::json!({"fleet": fleet, "plan": plan})
}

/// Evaluates every policy against `input`; the first broken policy is an error.
pub fn evaluate(policies: &[Policy], input: &Value) -> Result<Outcome, PolicyError> {
    let mut out = Outcome::default();
    let input_text = input.to_string();
    for p in policies {
        let mut engine = regorus::Engine::new();
        let package = engine
            .add_policy(p.path.clone(), p.source.clone())
            .map_err(|e| located(&p.path, &e.to_string()))?;
        engine
            .set_input_json(&input_text)
            .map_err(|e| PolicyError::Eval {
                policy: p.path.clone(),
                message: e.to_string(),
            })?;
        let results = engine.eval_query(package.clone(), false).map_err(|e| {
            let text = e.to_string();
            if text.contains(&format!("--> {}:", p.path)) {
                located(&p.path, &text)
            } else {
                PolicyError::Eval {
                    policy: p.path.clone(),
                    message: text.lines().next().unwrap_or_default().to_string(),
                }
            }
        })?;
        out.policies.push(p.path.clone());
        let value = results
            .result
            .first()
            .and_then(|r| r.expressions.first())
            .map(|e| e.value.to_json_str().unwrap_or_default())
            .unwrap_or_default();
        let Ok(Value::Object(rules)) = serde_json::from_str::<Value>(&value) else {
            continue;
        };
        for (rule, v) in rules {
            let level = if rule == "deny" || rule.starts_with("deny_") {
                Level::Deny
            } else if rule == "warn" || rule.starts_with("warn_") {
                Level::Warn
            } else {
                continue;
            };
            let entries: Vec<Value> = match v {
                Value::Array(a) => a,
                Value::Bool(true) => vec![Value::String(format!("{rule} is true"))],
                Value::Bool(false) | Value::Null => Vec::new(),
                other => vec![other],
            };
            for e in entries {
                let (container, message) = match e {
                    Value::String(s) => (None, s),
                    Value::Object(m) => (
                        m.get("container")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        m.get("msg")
                            .or_else(|| m.get("message"))
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .unwrap_or_else(|| Value::Object(m.clone()).to_string()),
                    ),
                    other => (None, other.to_string()),
                };
                out.findings.push(Finding {
                    level,
                    policy: p.path.clone(),
                    rule: rule.clone(),
                    container,
                    message,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(src: &str) -> Policy {
        Policy {
            path: "policies/p.rego".into(),
            source: src.into(),
        }
    }

    #[test]
    fn allow_deny_and_warn() {
        let p = policy(
            "package pxfleet.t\n\
             deny_privileged contains {\"msg\": \"privileged\", \"container\": name} if {\n\
               some name, c in input.fleet.containers\n\
               c.unprivileged == false\n\
             }\n\
             warn contains \"no tags\" if { some c in input.fleet.containers; count(c.tags) == 0 }\n",
        );
        let ok = json!({"fleet": {"containers": {"a": {"unprivileged": true, "tags": ["x"]}}}, "plan": {}});
        let out = evaluate(std::slice::from_ref(&p), &ok).unwrap();
        assert_eq!(out.policies, vec!["policies/p.rego".to_string()]);
        assert!(out.findings.is_empty(), "{out:?}");

        let bad = json!({"fleet": {"containers": {"a": {"unprivileged": false, "tags": []}}}, "plan": {}});
        let out = evaluate(&[p], &bad).unwrap();
        assert!(out.denied());
        let d = out.denials();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].rule, "deny_privileged");
        assert_eq!(d[0].container.as_deref(), Some("a"));
        assert_eq!(
            d[0].to_string(),
            "policies/p.rego: deny_privileged: container a: privileged"
        );
        assert!(out
            .findings
            .iter()
            .any(|f| f.level == Level::Warn && f.message == "no tags"));
    }

    #[test]
    fn a_broken_policy_is_an_error_with_its_line_and_column() {
        let p = policy("package t\n\ndeny contains msg if {\n  msg := \n}\n");
        let err = evaluate(&[p], &json!({})).unwrap_err();
        match &err {
            PolicyError::Invalid { policy, line, .. } => {
                assert_eq!(policy, "policies/p.rego");
                assert_eq!(*line, 4, "{err}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string()
                .starts_with("policies/p.rego:4:7: expecting `}` while parsing set"),
            "{err}"
        );
    }
}
