//! `pvesim` binary: hands argv and the environment to the library and prints what it returns.

use std::io::Write;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PXFLEET_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_else(|| "pvesim".into());
    let args: Vec<String> = argv.collect();
    let env = std::env::vars().collect();
    let out = pxfleet_pvesim::run_io(&argv0, &args, &env, &mut std::io::stdin().lock());
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    let _ = std::io::stdout().flush();
    std::process::exit(out.code);
}
