//! The template seeder against a real HTTP server on 127.0.0.1:0.

mod common;

use std::time::Duration;

use pxfleet_agent::ops::Digest;
use pxfleet_agent::{SeedError, Seeder};

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn good_checksum_lands_the_file_under_its_name() {
    let body = b"template bytes ".repeat(10_000);
    let srv = common::serve(body.clone(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let seeder = Seeder::new(None);
    let digest = Digest::Sha256(common::sha256_hex(&body));
    let seeded = seeder
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            Some(&digest),
        )
        .await
        .unwrap();
    assert_eq!(std::fs::read(&seeded.path).unwrap(), body);
    assert_eq!(seeded.sha256, common::sha256_hex(&body));
    assert_eq!(files(dir.path()), vec!["t.tar.zst"]);
    // Present and verified: no second download.
    seeder
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            Some(&digest),
        )
        .await
        .unwrap();
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A fresh seeder (agent restart) re-hashes the file instead of downloading it again.
    Seeder::new(None)
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            Some(&digest),
        )
        .await
        .unwrap();
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bad_checksum_names_both_digests_and_leaves_no_file() {
    let body = b"not what you expected".to_vec();
    let srv = common::serve(body.clone(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let want = "0".repeat(64);
    let err = Seeder::new(None)
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            Some(&Digest::Sha256(want.clone())),
        )
        .await
        .unwrap_err();
    match &err {
        SeedError::Mismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, &want);
            assert_eq!(actual, &common::sha256_hex(&body));
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&want) && msg.contains(&common::sha256_hex(&body)),
        "{msg}"
    );
    assert!(
        files(dir.path()).is_empty(),
        "left: {:?}",
        files(dir.path())
    );
}

#[tokio::test]
async fn concurrent_requests_share_one_download() {
    let body = b"shared".repeat(1000);
    let srv = common::serve(body.clone(), Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let seeder = Seeder::new(None);
    let digest = Digest::Sha256(common::sha256_hex(&body));
    let url = format!("{}/t.tar.zst", srv.url);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (s, d, u, g) = (
            seeder.clone(),
            dir.path().to_path_buf(),
            url.clone(),
            digest.clone(),
        );
        tasks.push(tokio::spawn(async move {
            s.ensure(&d, "t.tar.zst", &u, Some(&g)).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(seeder.downloads(), 1);
    assert_eq!(files(dir.path()), vec!["t.tar.zst"]);
}

#[tokio::test]
async fn concurrent_waiters_all_see_a_mismatch() {
    let srv = common::serve(b"abc".to_vec(), Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let seeder = Seeder::new(None);
    let digest = Digest::Sha512("f".repeat(128));
    let url = format!("{}/t.tar.zst", srv.url);
    let (a, b) = tokio::join!(
        seeder.ensure(dir.path(), "t.tar.zst", &url, Some(&digest)),
        seeder.ensure(dir.path(), "t.tar.zst", &url, Some(&digest))
    );
    assert!(matches!(a, Err(SeedError::Mismatch { .. })));
    assert_eq!(a, b);
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(files(dir.path()).is_empty());
}

#[tokio::test]
async fn redirects_are_followed_and_http_errors_reported() {
    let body = b"redirected".to_vec();
    let srv = common::serve(body.clone(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let seeder = Seeder::new(None);
    let digest = Digest::Sha256(common::sha256_hex(&body));
    seeder
        .ensure(
            dir.path(),
            "r.tar.zst",
            &format!("{}/redirect", srv.url),
            Some(&digest),
        )
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.path().join("r.tar.zst")).unwrap(), body);
    let err = seeder
        .ensure(
            dir.path(),
            "m.tar.zst",
            &format!("{}/missing", srv.url),
            Some(&digest),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, SeedError::Status { status: 404, .. }),
        "{err}"
    );
    assert_eq!(files(dir.path()), vec!["r.tar.zst"]);
}

#[tokio::test]
async fn a_bad_extra_ca_file_is_reported_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not a pem").unwrap();
    let err = Seeder::new(Some(ca.clone()))
        .ensure(
            dir.path(),
            "t.tar.zst",
            "https://127.0.0.1:1/t.tar.zst",
            Some(&Digest::Sha256("0".repeat(64))),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SeedError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("ca.pem"), "{err}");
}

#[tokio::test]
async fn without_a_checksum_the_file_lands_and_its_sha256_is_reported() {
    let body = b"unpinned template ".repeat(5_000);
    let srv = common::serve(body.clone(), Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let seeder = Seeder::new(None);
    let url = format!("{}/t.tar.zst", srv.url);
    // Two concurrent requests share one download, temp file + rename as with a checksum.
    let (a, b) = tokio::join!(
        seeder.ensure(dir.path(), "t.tar.zst", &url, None),
        seeder.ensure(dir.path(), "t.tar.zst", &url, None)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert_eq!(a.sha256, common::sha256_hex(&body));
    assert_eq!(std::fs::read(&a.path).unwrap(), body);
    assert_eq!(files(dir.path()), vec!["t.tar.zst"]);
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A fresh seeder keeps the file there and reports the digest of what is on disk.
    std::fs::write(dir.path().join("t.tar.zst"), b"changed on disk").unwrap();
    let again = Seeder::new(None)
        .ensure(dir.path(), "t.tar.zst", &url, None)
        .await
        .unwrap();
    assert_eq!(again.sha256, common::sha256_hex(b"changed on disk"));
    assert_eq!(srv.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_sha512_checksum_still_reports_the_sha256() {
    use sha2::Digest as _;
    let body = b"sha512 template".to_vec();
    let srv = common::serve(body.clone(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let want = hex::encode(sha2::Sha512::digest(&body));
    let seeded = Seeder::new(None)
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            Some(&Digest::Sha512(want)),
        )
        .await
        .unwrap();
    assert_eq!(seeded.sha256, common::sha256_hex(&body));
}

/// A server that answers every request with `200 OK`, no Content-Length, then `len` bytes and a close: the
/// size is known only while streaming.
async fn serve_unannounced(len: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    .await;
                let _ = s.write_all(&vec![b'x'; len]).await;
                let _ = s.shutdown().await;
            });
        }
    });
    url
}

#[tokio::test]
async fn a_template_larger_than_template_max_bytes_is_refused_and_not_kept() {
    let limits = pxfleet_agent::DownloadLimits {
        max_bytes: 1000,
        timeout: Duration::from_secs(60),
    };
    // announced by Content-Length
    let srv = common::serve(vec![b'x'; 5000], Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let err = Seeder::with_limits(None, limits)
        .ensure(
            dir.path(),
            "t.tar.zst",
            &format!("{}/t.tar.zst", srv.url),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, SeedError::TooLarge { limit: 1000, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("template_max_bytes"), "{err}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    // not announced: counted while streaming
    let url = serve_unannounced(200_000).await;
    let err = Seeder::with_limits(None, limits)
        .ensure(dir.path(), "u.tar.zst", &format!("{url}/u.tar.zst"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, SeedError::TooLarge { .. }), "{err}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    // at the limit: accepted
    let url = serve_unannounced(1000).await;
    Seeder::with_limits(None, limits)
        .ensure(dir.path(), "v.tar.zst", &format!("{url}/v.tar.zst"), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_template_download_slower_than_template_timeout_secs_is_abandoned() {
    // the server waits 30 s before answering; the agent allows 1 s
    let srv = common::serve(b"late".to_vec(), Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().unwrap();
    let err = Seeder::with_limits(
        None,
        pxfleet_agent::DownloadLimits {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(1),
        },
    )
    .ensure(
        dir.path(),
        "t.tar.zst",
        &format!("{}/t.tar.zst", srv.url),
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SeedError::TimedOut { secs: 1, .. }), "{err}");
    assert!(err.to_string().contains("template_timeout_secs"), "{err}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}
