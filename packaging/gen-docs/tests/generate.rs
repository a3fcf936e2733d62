//! The generated completions and man pages cover pxctl's real subcommands and flags.

use std::fs::read_to_string;

#[test]
fn completions_and_man_pages_name_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = pxfleet_gen_docs::pxctl_command();
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    assert!(subcommands.iter().any(|s| s == "submit"), "{subcommands:?}");
    let g = pxfleet_gen_docs::generate(cmd, dir.path()).unwrap();

    assert_eq!(g.bash, dir.path().join("completions/pxctl"));
    assert_eq!(g.zsh, dir.path().join("completions/_pxctl"));
    assert_eq!(g.fish, dir.path().join("completions/pxctl.fish"));
    let bash = read_to_string(&g.bash).unwrap();
    let zsh = read_to_string(&g.zsh).unwrap();
    let fish = read_to_string(&g.fish).unwrap();
    assert!(
        bash.contains("complete -F _pxctl"),
        "bash completion registers pxctl"
    );
    assert!(zsh.starts_with("#compdef pxctl"), "zsh completion header");
    for sub in &subcommands {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
        assert!(zsh.contains(sub), "zsh completion lacks {sub}");
        assert!(
            fish.contains(&format!("-a \"{sub}\"")),
            "fish completion lacks {sub}"
        );
    }
    assert!(bash.contains("--controller"), "global flags are completed");

    let main = dir.path().join("man/pxctl.1");
    assert!(g.man_pages.contains(&main), "{:?}", g.man_pages);
    let page = read_to_string(&main).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(page.contains(".TH pxctl 1"), "{page}");
    assert!(
        page.contains(&format!("pxctl {version}")),
        "man page carries the version"
    );
    for sub in &subcommands {
        assert!(page.contains(sub), "pxctl.1 lacks {sub}");
        let sub_page = dir.path().join(format!("man/pxctl-{sub}.1"));
        assert!(g.man_pages.contains(&sub_page), "no page for {sub}");
    }
    let token = dir.path().join("man/pxctl-node-token-create.1");
    assert!(g.man_pages.contains(&token), "nested subcommands get pages");
    assert!(
        read_to_string(&token).unwrap().contains("\\-\\-ttl"),
        "a subcommand page documents its flags"
    );
    assert!(
        !g.man_pages
            .iter()
            .any(|p| p.to_string_lossy().contains("help")),
        "no pages for clap's help subcommands: {:?}",
        g.man_pages
    );
}
