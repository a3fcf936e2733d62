//! Unit tests of the fleet model (spans, MAC addresses, template file names).

use super::*;

#[test]
fn secret_never_prints() {
    let s = Secret::new("hunter2");
    assert_eq!(format!("{s}"), REDACTED);
    assert_eq!(format!("{s:?}"), REDACTED);
    assert_eq!(serde_json::to_string(&s).unwrap(), "\"(sensitive)\"");
    assert_eq!(s.expose(), "hunter2");
}

#[test]
fn mac_parses_and_prints_upper() {
    let m: MacAddr = "bc:24:11:2a:3b:4c".parse().unwrap();
    assert_eq!(m.to_string(), "BC:24:11:2A:3B:4C");
    assert!("bc:24:11:2a:3b".parse::<MacAddr>().is_err());
    assert!("zz:24:11:2a:3b:4c".parse::<MacAddr>().is_err());
}

#[test]
fn spans_lookup_falls_back() {
    let mut s = Spans::default();
    s.insert("containers.web", Span { line: 5, column: 3 });
    s.insert(
        "defaults.memory",
        Span {
            line: 2,
            column: 11,
        },
    );
    assert_eq!(
        s.lookup("containers.web.memory"),
        Span {
            line: 2,
            column: 11
        }
    );
    assert_eq!(
        s.lookup("containers.web.cores"),
        Span { line: 5, column: 3 }
    );
    assert_eq!(s.lookup("nothing"), Span { line: 1, column: 1 });
}

#[test]
fn spans_sort_dedup_and_round_trip() {
    let a = Span { line: 1, column: 1 };
    let b = Span { line: 2, column: 5 };
    let s = Spans::from_unsorted([("z.y", b), ("a", b), ("z.y", a), ("m", a)]);
    assert_eq!(s.len(), 3);
    assert_eq!(s.get("z.y"), Some(a), "the last position given wins");
    assert_eq!(
        s.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        ["a", "m", "z.y"]
    );
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(
        json,
        r#"{"a":{"line":2,"column":5},"m":{"line":1,"column":1},"z.y":{"line":1,"column":1}}"#
    );
    let back: Spans = serde_json::from_str(&json).unwrap();
    assert_eq!(
        back.iter().collect::<Vec<_>>(),
        s.iter().collect::<Vec<_>>()
    );
    let mut t = Spans::default();
    t.insert("b", a);
    t.insert("a", b);
    t.insert("b", b);
    assert_eq!(t.iter().collect::<Vec<_>>(), [("a", b), ("b", b)]);
}

#[test]
fn url_file_name_strips_query() {
    assert_eq!(url_file_name("https://x/a/b.tar.xz?x=1"), "b.tar.xz");
}
