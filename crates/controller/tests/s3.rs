//! Backups in S3-compatible storage, against a real S3 server started here: moto's (`python3 -m moto.server`, from
//! `moto[server]`) on 127.0.0.1. Without moto installed the test is skipped with a message saying so.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pxfleet_controller::backup;
use pxfleet_controller::backup::s3::S3Config;
use pxfleet_controller::model::DesiredContainer;
use pxfleet_controller::store::{Store, SubmitTx};

struct Moto {
    child: Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto's S3 server on a free loopback port, or `None` (with the reason printed) when moto is not installed.
fn moto(log: &std::path::Path) -> Option<Moto> {
    let probe = Command::new("python3")
        .args(["-c", "import moto.server"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(probe, Ok(s) if s.success()) {
        // CI installs moto (.ci/run): there, a missing server is a failure, not a skip
        assert!(
            std::env::var_os("CI").is_none(),
            "moto is not installed but CI is set: .ci/run must install moto[server]"
        );
        eprintln!("SKIPPED: moto is not installed (python3 -m pip install 'moto[server]'); no S3 server to test against");
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new("python3")
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("starting moto");
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "moto did not listen on {port}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(moto)
}

fn populated(dir: &std::path::Path, key: &std::path::Path) {
    let store = Store::open_sealed(&dir.join("db"), key).unwrap();
    let spec = serde_json::json!({"name": "dev"});
    let desired: Vec<DesiredContainer> = vec![];
    store
        .submit(&SubmitTx {
            fleet: "dev".into(),
            expected_revision: Some(0),
            author: "admin".into(),
            time_ms: 5,
            spec: pxfleet_controller::store::spec_json(&spec).unwrap(),
            summary: "nothing".into(),
            desired,
            secrets: [("web".to_string(), "pw-123456".to_string())].into(),
            audit_action: "submit".into(),
            file_name: "fleet.yaml".into(),
            source_sha256: "ab".repeat(32),
            retry: vec![],
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_goes_to_s3_and_comes_back_identical_and_restores() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(moto) = moto(&tmp.path().join("moto.log")) else {
        return;
    };
    let creds = tmp.path().join("s3.toml");
    std::fs::write(
        &creds,
        "access_key_id = \"testing\"\nsecret_access_key = \"testing-secret\"\n",
    )
    .unwrap();
    // the bucket, made with the same client
    let region = s3::Region::Custom {
        region: "eu-central-1".into(),
        endpoint: moto.endpoint.clone(),
    };
    let c = s3::creds::Credentials::new(Some("testing"), Some("testing-secret"), None, None, None)
        .unwrap();
    s3::Bucket::create_with_path_style("pxfleet", region, c, s3::BucketConfiguration::default())
        .await
        .unwrap();
    let cfg = S3Config {
        endpoint: moto.endpoint.clone(),
        bucket: "pxfleet".into(),
        region: "eu-central-1".into(),
        path_style: true,
        prefix: "ctl/".into(),
        credentials_file: creds.clone(),
    };

    let (a, b, key) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("seal.key"),
    );
    populated(&a, &key);
    let file = tmp.path().join("state.pxbackup");
    backup::backup(&a, &file).unwrap();
    let data = std::fs::read(&file).unwrap();
    let name = cfg.key_for(1_796_292_000_000);
    assert_eq!(name, "ctl/pxfleet-20261203T100000Z.pxbackup");
    cfg.put(&name, &data).await.unwrap();
    let back = cfg.get(&name).await.unwrap();
    assert_eq!(back, data, "the object is the backup file, byte for byte");
    backup::restore_bytes(&b, &back, std::path::Path::new(&cfg.url(&name)), false).unwrap();
    let (sa, sb) = (
        Store::open_sealed(&a.join("db"), &key).unwrap(),
        Store::open_sealed(&b.join("db"), &key).unwrap(),
    );
    assert_eq!(sa.fleets().unwrap(), sb.fleets().unwrap());
    assert_eq!(sa.revisions("dev").unwrap(), sb.revisions("dev").unwrap());
    assert_eq!(sb.secrets("dev").unwrap()["web"], "pw-123456");

    // the same through the binary: `backup --s3` uploads, `restore --from-s3 KEY` takes it back
    let c = tmp.path().join("c");
    let toml = |dir: &std::path::Path| {
        format!(
            "data_dir = {:?}\nseal_key = {:?}\n[backup.s3]\nendpoint = {:?}\nbucket = \"pxfleet\"\nregion = \"eu-central-1\"\nprefix = \"bin/\"\ncredentials_file = {:?}\n",
            dir.display().to_string(),
            key.display().to_string(),
            moto.endpoint,
            creds.display().to_string()
        )
    };
    let (ca, cc) = (tmp.path().join("a.toml"), tmp.path().join("c.toml"));
    std::fs::write(&ca, toml(&a)).unwrap();
    std::fs::write(&cc, toml(&c)).unwrap();
    drop((sa, sb));
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_pxcontroller"))
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "pxcontroller {args:?}: {text}");
        text
    };
    let out = run(&["backup", "--config", ca.to_str().unwrap(), "--s3"]);
    let key_name = out
        .split("--from-s3 ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no object key in: {out}"))
        .to_string();
    assert!(key_name.starts_with("bin/pxfleet-"), "{out}");
    run(&[
        "restore",
        "--config",
        cc.to_str().unwrap(),
        "--from-s3",
        &key_name,
    ]);
    let sc = Store::open_sealed(&c.join("db"), &key).unwrap();
    assert_eq!(sc.revisions("dev").unwrap().len(), 1);
    assert_eq!(sc.secrets("dev").unwrap()["web"], "pw-123456");

    // a missing object is an error naming its URL
    let err = cfg.get("ctl/nope.pxbackup").await.unwrap_err().to_string();
    assert!(err.contains("/pxfleet/ctl/nope.pxbackup"), "{err}");
    // a credentials file that is not TOML is refused without quoting it
    std::fs::write(&creds, "testing-secret\n").unwrap();
    let err = cfg.put(&name, &data).await.unwrap_err().to_string();
    assert!(
        err.contains("s3.toml") && !err.contains("testing-secret"),
        "{err}"
    );
}
