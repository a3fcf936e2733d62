//! Fuzz-like property tests on stable Rust: the parser never panics on arbitrary or mutated
//! input, every diagnostic points inside the file, and generated valid fleets resolve to
//! exactly what they say.

use proptest::prelude::*;
use pxfleet_spec::*;

const DEV: &str = include_str!("../../../examples/dev/fleet.yaml");
const PROD: &str = include_str!("../../../examples/prod/fleet.yaml");

fn check_no_panic(text: &str) {
    let files = MemFiles::default().with(
        "keys/ops.pub",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx x\n",
    );
    // YAML line breaks are \n, \r\n and a lone \r (str::lines misses the last).
    let breaks =
        text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count();
    let lines = breaks as u32 + 1;
    match parse_fleet("fuzz.yaml", text, &files) {
        Ok(f) => {
            // a fleet that parses is internally consistent
            for c in f.containers.values() {
                assert!(f.templates.contains_key(&c.template));
                assert!(!c.interfaces.is_empty());
            }
        }
        Err(d) => {
            assert!(!d.is_empty());
            for x in d.iter() {
                assert!(
                    x.line >= 1 && x.line <= lines.max(1) + 1,
                    "line {} outside a {lines}-line file: {x}",
                    x.line
                );
                assert!(x.column >= 1);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Replace(usize, String),
    DupLine(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let piece = prop_oneof![
        Just(": ".to_string()),
        Just("\n".to_string()),
        Just("  ".to_string()),
        Just("- ".to_string()),
        Just("[".to_string()),
        Just("}".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("\"".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("dhcp".to_string()),
        Just("/33".to_string()),
        Just("file:x".to_string()),
        "[ -~]{1,6}",
    ];
    prop_oneof![
        (any::<usize>(), 1usize..20).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), piece.clone()).prop_map(|(a, s)| Edit::Insert(a, s)),
        (any::<usize>(), piece).prop_map(|(a, s)| Edit::Replace(a, s)),
        any::<usize>().prop_map(Edit::DupLine),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let len = chars.len().max(1);
        match e {
            Edit::Delete(a, n) => {
                let a = a % len;
                let b = (a + n).min(chars.len());
                if a < b {
                    chars.drain(a..b);
                }
            }
            Edit::Insert(a, s) => {
                let a = a % (chars.len() + 1);
                chars.splice(a..a, s.chars());
            }
            Edit::Replace(a, s) => {
                if !chars.is_empty() {
                    let a = a % chars.len();
                    chars.splice(a..a + 1, s.chars());
                }
            }
            Edit::DupLine(a) => {
                let t: String = chars.iter().collect();
                let lines: Vec<&str> = t.lines().collect();
                if !lines.is_empty() {
                    let i = a % lines.len();
                    let mut out = lines[..=i].join("\n");
                    out.push('\n');
                    out.push_str(&lines[i..].join("\n"));
                    chars = out.chars().collect();
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_yamlish_text_never_panics(s in "[a-z0-9_:\\-\\[\\]{}, \n\r\t#&*!|>'\"./@~]{0,300}") {
        check_no_panic(&s);
    }

    #[test]
    fn arbitrary_unicode_never_panics(s in "\\PC{0,200}") {
        check_no_panic(&s);
    }

    #[test]
    fn mutated_examples_never_panic(edits in proptest::collection::vec(edit(), 1..6), which in any::<bool>()) {
        let base = if which { DEV } else { PROD };
        check_no_panic(&apply(base, &edits));
    }

    #[test]
    fn generated_fleets_resolve_to_what_they_say(
        n in 1usize..20,
        memory in 16u64..100_000,
        cores in 1u32..8192,
        vlan in 1u16..4095,
        base_id in 100u32..1_000_000,
    ) {
        let mut text = String::from("fleet: gen\ntemplates:\n  d: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ndefaults: {template: d}\ncontainers:\n");
        for i in 0..n {
            text.push_str(&format!(
                "  c{i}:\n    vm_id: {}\n    memory: {memory}\n    cores: {cores}\n    vlan_id: {vlan}\n    ip_address: 10.{}.{}.10/24\n    gateway: 10.{}.{}.1\n",
                base_id + i as u32, i / 200, i % 200, i / 200, i % 200
            ));
        }
        let f = parse_fleet("gen.yaml", &text, &NoFiles).unwrap();
        prop_assert_eq!(f.containers.len(), n);
        for (i, c) in (0..n).map(|i| (i, &f.containers[&format!("c{i}")])) {
            prop_assert_eq!(c.vm_id, Some(base_id + i as u32));
            prop_assert_eq!(c.memory, memory);
            prop_assert_eq!(c.cores, Some(cores));
            prop_assert_eq!(c.interfaces[0].vlan_id, Some(vlan));
            prop_assert_eq!(&c.hostname, &format!("c{i}"));
            prop_assert_eq!(c.swap, DEFAULT_SWAP_MIB);
            prop_assert_eq!(f.spans.get(&format!("containers.c{i}.memory")).unwrap().line, 5 + 7 * i as u32 + 3);
        }
    }
}

/// Found by cargo-fuzz: a lone `\r` is a YAML line break, so positions count it as one.
#[test]
fn lone_carriage_returns_count_as_line_breaks() {
    let errs = parse_fleet(
        "cr.yaml",
        "fleet: t\rcontainers: {}\r\nbogus: 1\r",
        &NoFiles,
    )
    .unwrap_err();
    assert_eq!(errs.len(), 1, "{errs}");
    assert_eq!((errs.0[0].line, errs.0[0].column), (3, 1), "{errs}");
    assert_eq!(errs.0[0].path, "bogus");
    check_no_panic(&std::iter::repeat_n("\r", 60).collect::<String>());
}
