//! `pxfleet-gen-docs OUT_DIR`: writes pxctl's completions and man pages for packaging/build-debs.

use std::path::PathBuf;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: pxfleet-gen-docs OUT_DIR")?;
    let g = pxfleet_gen_docs::generate(pxfleet_gen_docs::pxctl_command(), &out)?;
    for p in [&g.bash, &g.zsh, &g.fish].into_iter().chain(&g.man_pages) {
        println!("{}", p.display());
    }
    Ok(())
}
