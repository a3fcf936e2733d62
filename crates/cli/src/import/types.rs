//! Terraform type constraints (`map(object({a = optional(number, 2)}))`) and the defaults they put into a
//! variable's value: an attribute left out of an object gets its `optional(TYPE, DEFAULT)` default (or null),
//! recursively, as Terraform does.

use hcl::expr::{Expression, FuncCall, ObjectKey};
use hcl::{Map, Value};

/// A type constraint, as far as defaults are concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// `string`, `number`, `bool`, `any`, tuples: no defaults inside.
    Plain,
    /// `map(T)`.
    Map(Box<Ty>),
    /// `list(T)`, `set(T)`.
    List(Box<Ty>),
    /// `object({...})`: each attribute's type and how it may be left out.
    Object(Vec<Field>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: Ty,
    pub presence: Presence,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Presence {
    Required,
    /// `optional(T)`: null when left out.
    Optional,
    /// `optional(T, DEFAULT)`.
    Default(Value),
}

/// Reads a type constraint; anything not understood counts as [`Ty::Plain`].
pub fn parse(e: &Expression) -> Ty {
    match e {
        Expression::FuncCall(f) => parse_call(f),
        _ => Ty::Plain,
    }
}

fn call_name(f: &FuncCall) -> String {
    f.name.name.to_string()
}

fn parse_call(f: &FuncCall) -> Ty {
    match (call_name(f).as_str(), f.args.first()) {
        ("map", Some(a)) => Ty::Map(Box::new(parse(a))),
        ("list" | "set", Some(a)) => Ty::List(Box::new(parse(a))),
        ("object", Some(Expression::Object(o))) => Ty::Object(
            o.iter()
                .map(|(k, v)| {
                    let name = match k {
                        ObjectKey::Identifier(i) => i.to_string(),
                        ObjectKey::Expression(Expression::String(s)) => s.clone(),
                        ObjectKey::Expression(e) => e.to_string(),
                        _ => String::new(),
                    };
                    let (ty, presence) = field(v);
                    Field { name, ty, presence }
                })
                .collect(),
        ),
        _ => Ty::Plain,
    }
}

fn field(e: &Expression) -> (Ty, Presence) {
    if let Expression::FuncCall(f) = e {
        if call_name(f) == "optional" {
            let ty = f.args.first().map(parse).unwrap_or(Ty::Plain);
            let presence = match f.args.get(1) {
                Some(d) => match static_value(d) {
                    Some(v) => Presence::Default(v),
                    None => Presence::Optional,
                },
                None => Presence::Optional,
            };
            return (ty, presence);
        }
    }
    (parse(e), Presence::Required)
}

/// A literal default (`2`, `"local-lvm"`, `null`, `{}`); type defaults in Terraform are constants.
fn static_value(e: &Expression) -> Option<Value> {
    use hcl::eval::Evaluate;
    e.evaluate(&hcl::eval::Context::new()).ok()
}

/// One default taken from somewhere else than the variable's own type (see [`apply`]'s `fallback`).
#[derive(Debug, Clone, PartialEq)]
pub struct Borrowed {
    /// Where in the value: `["dev-nextcloud"].template_url`.
    pub path: String,
    pub value: Value,
}

/// Puts `ty`'s defaults into `v`. Where `ty` leaves an attribute null (`optional(T)` without a default) and
/// `fallback` (another declaration of the same variable) has a default for it, that default is used and
/// reported in `borrowed`.
pub fn apply(
    ty: &Ty,
    v: Value,
    fallback: Option<&Ty>,
    path: &str,
    borrowed: &mut Vec<Borrowed>,
) -> Value {
    match (ty, v) {
        (Ty::Map(inner), Value::Object(m)) => {
            let fb = match fallback {
                Some(Ty::Map(f)) => Some(&**f),
                _ => None,
            };
            Value::Object(
                m.into_iter()
                    .map(|(k, v)| {
                        let p = format!("{path}[{k:?}]");
                        let v = apply(inner, v, fb, &p, borrowed);
                        (k, v)
                    })
                    .collect(),
            )
        }
        (Ty::List(inner), Value::Array(a)) => {
            let fb = match fallback {
                Some(Ty::List(f)) => Some(&**f),
                _ => None,
            };
            Value::Array(
                a.into_iter()
                    .enumerate()
                    .map(|(i, v)| apply(inner, v, fb, &format!("{path}[{i}]"), borrowed))
                    .collect(),
            )
        }
        (Ty::Object(fields), Value::Object(mut m)) => {
            let fb_fields = match fallback {
                Some(Ty::Object(f)) => Some(f),
                _ => None,
            };
            let mut out = Map::new();
            for f in fields {
                let fb = fb_fields.and_then(|fs| fs.iter().find(|x| x.name == f.name));
                let p = if path.is_empty() {
                    f.name.clone()
                } else {
                    format!("{path}.{}", f.name)
                };
                let given = m.shift_remove(&f.name).filter(|v| !v.is_null());
                let v = match (given, &f.presence) {
                    (Some(v), _) => v,
                    (None, Presence::Default(d)) => d.clone(),
                    (None, _) => match fb.map(|x| &x.presence) {
                        Some(Presence::Default(d)) => {
                            borrowed.push(Borrowed {
                                path: p.clone(),
                                value: d.clone(),
                            });
                            d.clone()
                        }
                        _ => Value::Null,
                    },
                };
                let v = if v.is_null() {
                    v
                } else {
                    apply(&f.ty, v, fb.map(|x| &x.ty), &p, borrowed)
                };
                out.insert(f.name.clone(), v);
            }
            // Attributes the type does not declare are dropped by Terraform's conversion; keep them visible.
            out.extend(m);
            Value::Object(out)
        }
        (_, v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(v: &'a Value, k: &str) -> &'a Value {
        v.as_object().and_then(|m| m.get(k)).expect(k)
    }

    fn ty(src: &str) -> Ty {
        parse(&src.parse::<Expression>().unwrap())
    }

    #[test]
    fn nested_optional_defaults_are_filled_in() {
        let t = ty(r#"map(object({
            vm_id = number
            cores = optional(number, 2)
            gateway = optional(string, null)
            url = optional(string)
            features = optional(object({ nesting = optional(bool, true), fuse = optional(bool, false) }), {})
        }))"#);
        let mut v = Map::new();
        let mut a = Map::new();
        a.insert("vm_id".into(), Value::from(100));
        v.insert("a".into(), Value::Object(a));
        let mut borrowed = Vec::new();
        let out = apply(&t, Value::Object(v), None, "", &mut borrowed);
        let a = get(&out, "a");
        assert_eq!(get(a, "cores"), &Value::from(2));
        assert_eq!(get(a, "gateway"), &Value::Null);
        assert_eq!(get(a, "url"), &Value::Null);
        assert_eq!(get(get(a, "features"), "nesting"), &Value::Bool(true));
        assert_eq!(get(get(a, "features"), "fuse"), &Value::Bool(false));
        assert!(borrowed.is_empty());

        let fb = ty(r#"map(object({ url = optional(string, "https://x/y.tar.xz") }))"#);
        let mut v = Map::new();
        v.insert("a".into(), Value::Object(Map::new()));
        let out = apply(&t, Value::Object(v), Some(&fb), "", &mut borrowed);
        assert_eq!(
            get(get(&out, "a"), "url"),
            &Value::from("https://x/y.tar.xz")
        );
        assert_eq!(borrowed.len(), 1);
        assert_eq!(borrowed[0].path, r#"["a"].url"#);
    }
}
