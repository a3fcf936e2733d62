//! A small YAML document tree with a source position on every node, built from saphyr's event
//! parser. Building it ourselves (rather than using saphyr's loaded tree) is what lets us report
//! duplicate keys, which a loaded mapping silently collapses, and bound alias expansion and
//! nesting depth so that hostile input cannot exhaust memory or the stack.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle};

use crate::diag::Diagnostic;
use crate::model::Span;

/// Deepest nesting accepted (a fleet file needs about 6).
pub const MAX_DEPTH: usize = 64;
/// Most nodes a document may expand to, aliases included (a 10,000-container file has ~500,000).
pub const MAX_NODES: usize = 2_000_000;

/// What aliases may add to a document, in bytes of memory, beyond [`ALIAS_BYTES_PER_INPUT_BYTE`] per byte of
/// the file: a 648-byte alias bomb expanded to a quarter of a gigabyte per request before this bound (the
/// node limit alone allowed 2,000,000 copies).
pub const ALIAS_BYTES_BASE: usize = 4 << 20;
/// What aliases may add per byte of the file (a 10,000-container file that merges one `&defaults` into every
/// container stays well within it).
pub const ALIAS_BYTES_PER_INPUT_BYTE: usize = 16;

/// Memory one node takes in the tree besides its text (the node, its entry, vector slots), for the alias bound.
const NODE_BYTES: usize = 96;

/// The memory a copy of `n` takes (an estimate good to a small factor): what an alias to it costs.
fn node_weight(n: &Node) -> usize {
    NODE_BYTES
        + match &n.value {
            Value::Scalar { text, .. } => text.len(),
            Value::Seq(v) => v.iter().map(node_weight).sum::<usize>(),
            Value::Map(v) => v
                .iter()
                .map(|e| NODE_BYTES + e.key.len() + node_weight(&e.value))
                .sum::<usize>(),
        }
}

/// A YAML node and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub span: Span,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A scalar; `plain` is false for quoted and block scalars (which are always strings).
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    /// Entries in file order; keys are unique (duplicates are reported and dropped).
    Map(Vec<Entry>),
}

/// One `key: value` of a mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

impl Node {
    /// True for `~`, `null`, or an empty plain scalar (`key:` with nothing after it).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true } if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A short name of the node's kind, for "expected X, got Y" messages.
    pub fn kind(&self) -> &'static str {
        if self.is_null() {
            return "nothing (null)";
        }
        match &self.value {
            Value::Scalar { text, plain } => {
                if !plain {
                    "a string"
                } else if parse_bool(text).is_some() {
                    "a boolean"
                } else if text.parse::<i64>().is_ok() {
                    "an integer"
                } else if text.parse::<f64>().is_ok() {
                    "a number"
                } else {
                    "a string"
                }
            }
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// YAML 1.2 core-schema booleans.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn span_of(m: &saphyr_parser::Marker) -> Span {
    Span {
        line: u32::try_from(m.line()).unwrap_or(u32::MAX),
        column: u32::try_from(m.col() + 1).unwrap_or(u32::MAX),
    }
}

fn node_count(n: &Node) -> usize {
    match &n.value {
        Value::Scalar { .. } => 1,
        Value::Seq(v) => 1 + v.iter().map(node_count).sum::<usize>(),
        Value::Map(v) => 1 + v.iter().map(|e| 1 + node_count(&e.value)).sum::<usize>(),
    }
}

/// A collection being built.
enum Frame {
    Seq {
        span: Span,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        span: Span,
        anchor: usize,
        entries: Vec<Entry>,
        /// Key index for duplicate detection, built once a mapping is large (small mappings
        /// are scanned linearly, which is faster and allocates nothing).
        index: Option<HashMap<String, Span>>,
        /// The key read, waiting for its value; `None` when the next node is a key.
        pending_key: Option<(Option<String>, Span)>,
    },
}

/// Parse `text` into one document tree. Syntax errors end the parse (one diagnostic); duplicate
/// and non-scalar keys are reported into `diags` and the tree is still returned.
/// `Ok(None)` for an empty file.
pub fn parse(file: &str, text: &str, diags: &mut Vec<Diagnostic>) -> Option<Node> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, (Node, usize, usize)> = HashMap::new();
    let mut nodes = 0usize;
    let alias_budget =
        ALIAS_BYTES_BASE.saturating_add(text.len().saturating_mul(ALIAS_BYTES_PER_INPUT_BYTE));
    let mut alias_bytes = 0usize;
    let mut root: Option<Node> = None;
    let mut documents = 0usize;

    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(ev)) => ev,
            Some(Err(e)) => {
                let at = span_of(e.marker());
                diags.push(
                    Diagnostic::new(file, at, "", format!("YAML syntax error: {}", e.info()))
                        .with_hint("check indentation and quoting around this position"),
                );
                return None;
            }
        };
        let at = span_of(&span.start);
        let complete: Option<(Node, usize)> = match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => None,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    diags.push(
                        Diagnostic::new(
                            file,
                            at,
                            "",
                            "a fleet file holds one YAML document; found a second one",
                        )
                        .with_hint("put each fleet in its own file, or remove the extra `---`"),
                    );
                    return root;
                }
                None
            }
            Event::Alias(id) => match anchors.get(&id) {
                Some((n, size, weight)) => {
                    nodes += size;
                    alias_bytes = alias_bytes.saturating_add(*weight);
                    if alias_bytes > alias_budget {
                        diags.push(
                            Diagnostic::new(
                                file,
                                at,
                                "",
                                format!(
                                    "the aliases of this document expand to more than {} MiB (at most 4 MiB plus \
                                     16 times the file's size are accepted)",
                                    alias_budget >> 20
                                ),
                            )
                            .with_hint("write the repeated parts out, or use fewer nested aliases"),
                        );
                        return None;
                    }
                    if nodes > MAX_NODES {
                        diags.push(Diagnostic::new(
                            file,
                            at,
                            "",
                            format!("the document expands to more than {MAX_NODES} nodes through aliases"),
                        ));
                        return None;
                    }
                    let mut n = n.clone();
                    n.span = at;
                    Some((n, 0))
                }
                None => {
                    diags.push(Diagnostic::new(
                        file,
                        at,
                        "",
                        "alias refers to an unknown anchor",
                    ));
                    return None;
                }
            },
            Event::Scalar(text, style, anchor, _tag) => {
                nodes += 1;
                let plain = style == ScalarStyle::Plain;
                Some((
                    Node {
                        span: at,
                        value: Value::Scalar {
                            text: text.into_owned(),
                            plain,
                        },
                    },
                    anchor,
                ))
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                nodes += 1;
                if stack.len() >= MAX_DEPTH {
                    diags.push(Diagnostic::new(
                        file,
                        at,
                        "",
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                    ));
                    return None;
                }
                if matches!(event, Event::SequenceStart(..)) {
                    stack.push(Frame::Seq {
                        span: at,
                        anchor,
                        items: Vec::new(),
                    });
                } else {
                    stack.push(Frame::Map {
                        span: at,
                        anchor,
                        entries: Vec::new(),
                        index: None,
                        pending_key: None,
                    });
                }
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq {
                    span,
                    anchor,
                    items,
                }) => Some((
                    Node {
                        span,
                        value: Value::Seq(items),
                    },
                    anchor,
                )),
                _ => None,
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    span,
                    anchor,
                    entries,
                    ..
                }) => Some((
                    Node {
                        span,
                        value: Value::Map(entries),
                    },
                    anchor,
                )),
                _ => None,
            },
        };
        if nodes > MAX_NODES {
            diags.push(Diagnostic::new(
                file,
                at,
                "",
                format!("the document has more than {MAX_NODES} nodes"),
            ));
            return None;
        }
        let Some((node, anchor)) = complete else {
            continue;
        };
        if anchor != 0 {
            let size = node_count(&node);
            let weight = node_weight(&node);
            anchors.insert(anchor, (node.clone(), size, weight));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                index,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => {
                    let span = node.span;
                    let key = match node.value {
                        Value::Scalar { text, .. } => Some(text),
                        _ => {
                            diags.push(
                                Diagnostic::new(
                                    file,
                                    span,
                                    "",
                                    "mapping keys must be plain strings",
                                )
                                .with_hint(
                                    "write `name: value`; lists and mappings cannot be keys",
                                ),
                            );
                            None
                        }
                    };
                    *pending_key = Some((key, span));
                }
                Some((None, _)) => {}
                Some((Some(key), key_span)) => {
                    let first = match index {
                        Some(ix) => ix.get(&key).copied(),
                        None => entries.iter().find(|e| e.key == key).map(|e| e.key_span),
                    };
                    if let Some(first) = first {
                        diags.push(
                            Diagnostic::new(
                                file,
                                key_span,
                                "",
                                format!("duplicate key '{key}' (first given at line {})", first.line),
                            )
                            .with_hint("give each key once; the second one would silently win in other YAML tools"),
                        );
                    } else {
                        if let Some(ix) = index.as_mut() {
                            ix.insert(key.clone(), key_span);
                        } else if entries.len() >= 32 {
                            let mut ix: HashMap<String, Span> = entries
                                .iter()
                                .map(|e| (e.key.clone(), e.key_span))
                                .collect();
                            ix.insert(key.clone(), key_span);
                            *index = Some(ix);
                        }
                        entries.push(Entry {
                            key,
                            key_span,
                            value: node,
                        });
                    }
                }
            },
        }
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> (Option<Node>, Vec<Diagnostic>) {
        let mut d = Vec::new();
        let n = parse("f.yaml", text, &mut d);
        (n, d)
    }

    #[test]
    fn positions_are_one_based() {
        let (n, d) = p("a: 1\nb:\n  c: x\n");
        assert!(d.is_empty(), "{d:?}");
        let Value::Map(es) = n.unwrap().value else {
            panic!()
        };
        assert_eq!(es[1].key, "b");
        assert_eq!(es[1].key_span, Span { line: 2, column: 1 });
        let Value::Map(inner) = &es[1].value.value else {
            panic!()
        };
        assert_eq!(inner[0].value.span, Span { line: 3, column: 6 });
    }

    #[test]
    fn duplicate_keys_are_reported() {
        let (_, d) = p("a: 1\nb: 2\na: 3\n");
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].line, d[0].column), (3, 1));
        assert!(d[0].message.contains("duplicate key 'a'"));
    }

    #[test]
    fn syntax_error_has_position() {
        let (_, d) = p("a: [1, 2\nb: 3\n");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.starts_with("YAML syntax error"));
    }

    #[test]
    fn alias_bomb_is_bounded() {
        let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            s.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = i - 1
            ));
        }
        let (_, d) = p(&s);
        assert!(d.iter().any(|d| d.message.contains("more than")), "{d:?}");
    }

    /// Issue 24: a bomb of long strings stays far below the node limit, and is stopped by the bytes its
    /// aliases add (4 MiB plus 16 times the file): a 648-byte file used to reach 256 MB.
    #[test]
    fn aliases_add_at_most_a_few_mib_beyond_the_files_size() {
        let mut s = format!("a0: &a0 \"{}\"\n", "x".repeat(400));
        for i in 1..6 {
            let p = i - 1;
            s.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                vec![format!("*a{p}"); 9].join(", ")
            ));
        }
        assert!(s.len() < 1_000);
        let (_, d) = p(&s);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].message.contains("expand to more than 4 MiB"),
            "{}",
            d[0].message
        );
        // a file that merges its defaults into a thousand entries is fine
        let mut ok = String::from(
            "d: &d {memory: 512, cores: 2, tags: [a, b], description: some text}\nc:\n",
        );
        for i in 0..1000 {
            ok.push_str(&format!("  c{i}: {{<<: *d, vm_id: {}}}\n", 1000 + i));
        }
        let (n, d) = p(&ok);
        assert!(d.is_empty(), "{d:?}");
        assert!(n.is_some());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = "[".repeat(10_000);
        let (_, d) = p(&s);
        assert_eq!(d.len(), 1);
    }
}
